package db

import (
	"strings"
	"unicode/utf8"
)

// Varchar returns s as a utf8mb4 VARCHAR(n) column can hold it: valid
// UTF-8 (each run of invalid bytes becomes one U+FFFD) of at most n
// characters, cut on a character. Text the service does not write itself — a provider's
// answer, a transport's error — goes through it before it is stored:
// under STRICT_TRANS_TABLES a value the column refuses (1366 incorrect
// string value, 1406 data too long) fails the statement, and with it the
// transaction of every other row written alongside.
func Varchar(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s // n bytes are at most n characters
	}
	i, count := 0, 0
	for i < len(s) && count < n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		count++
	}
	return s[:i]
}
