// Package repocheck holds checks over the whole repository rather than one
// package. It has no code of its own, only tests.
package repocheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A fork has the repository and nothing else, so what the code and the
// docs rely on must be written in the repository: README.md,
// api/openapi.yaml, docs/*.md. These patterns catch references that lead
// outside it. They are assembled from pieces so that this file does not
// match them itself.
var (
	// The outside contract document, by its name.
	contractName = regexp.MustCompile(`\bCONTR` + `ACT\b`)

	// A numbered section sign. Sections of RFCs ("RFC 9457" then the sign
	// and a number) are public and allowed; they are removed first.
	section    = regexp.MustCompile("\u00a7" + `\s*\d`)
	rfcSection = regexp.MustCompile(`\bRFC\s*\d+,?\s*` + "\u00a7" + `\s*\d+(\.\d+)*`)

	// A tracker reference: the word and a number, with or without '#'
	// ("tickets" and "bugs" too). An issue URL of another project
	// (github.com/owner/name/issues/N) has a slash before the number and
	// does not match.
	trackerRef = regexp.MustCompile(`(?i)\b(?:is` + `sues?|tickets?|bugs?)\s*#?\s*\d+\b`)

	// A Markdown file name; it must name a tracked file.
	markdownName = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)
)

// checked reports whether a tracked file is one whose text is checked.
func checked(name string) bool {
	switch path.Ext(name) {
	case ".go", ".md", ".yaml", ".yml", ".sql", ".sh":
		return true
	}
	return path.Base(name) == "Dockerfile" || name == ".ci/run"
}

// finding is one offending line.
type finding struct {
	file string
	line int
	why  string
	text string
}

func (f finding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", f.file, f.line, f.why, strings.TrimSpace(f.text))
}

// lineProblems returns why a line cites something outside the repository
// (nil if it does not). exists says whether a Markdown name is a tracked
// file.
func lineProblems(line string, exists func(md string) bool) []string {
	var why []string
	if contractName.MatchString(line) {
		why = append(why, "names the outside contract")
	}
	if section.MatchString(rfcSection.ReplaceAllString(line, "")) {
		why = append(why, "cites a numbered section of a document not in the repository")
	}
	if m := trackerRef.FindString(line); m != "" {
		why = append(why, fmt.Sprintf("cites a tracker (%q)", m))
	}
	for _, loc := range markdownName.FindAllStringIndex(line, -1) {
		if partOfURL(line, loc[0], loc[1]) {
			continue
		}
		if name := line[loc[0]:loc[1]]; !exists(name) {
			why = append(why, fmt.Sprintf("names %s, which is not in the repository", name))
		}
	}
	return why
}

// partOfURL reports whether the word holding line[i:j] is a URL: an
// address elsewhere is public, like an RFC.
func partOfURL(line string, i, j int) bool {
	start := strings.LastIndexAny(line[:i], " \t(<[\"'`") + 1
	return strings.Contains(line[start:j], "://")
}

// markdownIndex answers whether a Markdown name, as written in a line
// ("docs/DESIGN.md", "./README.md", "../docs/FORKING.md", "DESIGN.md"),
// names a tracked file: the whole path, or its last elements.
func markdownIndex(files []string) func(string) bool {
	return func(name string) bool {
		for strings.HasPrefix(name, "./") || strings.HasPrefix(name, "../") {
			name = name[strings.Index(name, "/")+1:]
		}
		for _, f := range files {
			if f == name || strings.HasSuffix(f, "/"+name) {
				return true
			}
		}
		return false
	}
}

// trackedFiles lists the repository's tracked files, relative to its root.
func trackedFiles(t *testing.T) (root string, files []string) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed to list the tracked files: %v", err)
	}
	out, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	root = strings.TrimSpace(string(out))
	out, err = exec.Command(git, "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	if len(files) == 0 {
		t.Fatal("git ls-files listed no file")
	}
	return root, files
}

// TestNoCitationOutsideTheRepository fails for every line of a tracked Go
// file, document, spec, migration or script that cites the outside
// contract, a numbered section of a document that is not in the
// repository, a tracker issue, or a Markdown file that does not exist.
// Cite README.md's sections, api/openapi.yaml and docs/*.md by name
// instead, or state the rule where it is used.
func TestNoCitationOutsideTheRepository(t *testing.T) {
	root, files := trackedFiles(t)
	exists := markdownIndex(files)
	var found []finding
	var n int
	for _, name := range files {
		if !checked(name) {
			continue
		}
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet in the index
		}
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		n++
		for i, line := range strings.Split(string(text), "\n") {
			for _, why := range lineProblems(line, exists) {
				found = append(found, finding{file: name, line: i + 1, why: why, text: line})
			}
		}
	}
	for _, f := range found {
		t.Error(f)
	}
	if len(found) > 0 {
		t.Errorf("%d lines cite what a fork does not have; cite README.md, api/openapi.yaml or docs/ by section name instead", len(found))
	}
	if n < 50 {
		t.Fatalf("checked only %d files: the file list is wrong", n)
	}
	t.Logf("checked %d files", n)
}

// TestLineProblems holds the matcher to examples of what it must refuse
// and what it must let through.
func TestLineProblems(t *testing.T) {
	sign := "\u00a7"
	contract := "CONTR" + "ACT"
	notes := "FACTS" + ".md" // a file kept beside the repository, not in it
	exists := markdownIndex([]string{"README.md", "docs/DESIGN.md", "docs/BENCHMARKS.md"})
	tests := []struct {
		line string
		bad  bool
	}{
		{"// 503 unavailable (" + contract + " " + sign + "9).", true},
		{"// the events of " + sign + "5", true},
		{"// the events of " + sign + " 5", true},
		{"see " + contract + ".md", true},
		{"// (is" + "sue 11 item 4)", true},
		{"// Before Is" + "sue 18 the claim committed first", true},
		{"// see is" + "sue #42", true},
		{"| (j) | ... (is" + "sues 12 and 18) |", true},
		{"measured in ../shared/" + notes, true},
		{"the trap of " + notes, true},
		{"// Problems are RFC 9457 " + sign + "3 documents.", false},
		{"// case-insensitive (RFC 9110 " + sign + "11.1)", false},
		{"// delay-seconds or an HTTP date (RFC 9110, " + sign + "10.2.3)", false},
		{"// upstream: https://github.com/golang/go/is" + "sues/12345", false},
		{"// github.com/go-sql-driver/mysql/is" + "sues/1234 explains it", false},
		{"// a token is issued to the merchant; issue a token", false},
		{"Design and reasons: [docs/DESIGN.md](docs/DESIGN.md), \"Batches\".", false},
		{"(README.md, \"Calls to providers\"; ./README.md; ../docs/BENCHMARKS.md)", false},
		{"https://example.com/docs/CONTRIBUTING.md", false},
		{"the external contract: api/openapi.yaml plus README.md", false},
	}
	for _, tc := range tests {
		got := lineProblems(tc.line, exists)
		if (len(got) > 0) != tc.bad {
			t.Errorf("%q: problems %q, want bad=%v", tc.line, got, tc.bad)
		}
	}
}
