package config

import (
	"slices"
	"strings"
)

// prefix is what every variable of paysvc starts with.
const prefix = "PAYSVC_"

// Variables of the tests and benchmarks, which serve never reads: a
// developer's shell may hold them, and they are no misspelling.
var notServeVars = []string{"PAYSVC_TEST_", "PAYSVC_BENCH_"}

// Unknown is a PAYSVC_* variable of the environment that Load does not
// read, with the known name nearest to it: most often a misspelling, which
// would otherwise leave its default in force without a word.
type Unknown struct {
	Name    string
	Nearest string
}

// Known lists the variables Load reads, in the order it reads them. The
// list is what Load asks getenv for, so a variable is named once, where it
// is loaded, and can never be read without being known here.
func Known() []string {
	var names []string
	_, _ = Load(func(name string) string {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		return ""
	})
	return names
}

// UnknownVariables returns the PAYSVC_* variables of environ ("NAME=value"
// entries, as os.Environ gives them) that Load does not read, sorted by
// name; values are never looked at, so none can leak into a warning.
func UnknownVariables(environ []string) []Unknown {
	known := Known()
	var out []Unknown
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, prefix) || slices.Contains(known, name) || isNotServeVar(name) ||
			slices.ContainsFunc(out, func(u Unknown) bool { return u.Name == name }) {
			continue
		}
		out = append(out, Unknown{Name: name, Nearest: nearest(name, known)})
	}
	slices.SortFunc(out, func(a, b Unknown) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func isNotServeVar(name string) bool {
	return slices.ContainsFunc(notServeVars, func(p string) bool { return strings.HasPrefix(name, p) })
}

// nearest returns the name of names at the smallest edit distance from s
// (the first of equals).
func nearest(s string, names []string) string {
	best, bestDist := "", -1
	for _, n := range names {
		if d := editDistance(s, n); bestDist < 0 || d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes
// (variable names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
