package idemhttp

import (
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", 255)
	for _, tc := range []struct {
		name, value, key string
		ok               bool
	}{
		{"bare", "8e03978e-40d5-43e8", "8e03978e-40d5-43e8", true},
		{"quoted", `"8e03978e-40d5-43e8"`, "8e03978e-40d5-43e8", true},
		{"bare, every visible character but quote and backslash", "!#$%&'()*+,-./:;<=>?@[]^_`{|}~", "!#$%&'()*+,-./:;<=>?@[]^_`{|}~", true},
		{"quoted with a space", `"a b"`, "a b", true},
		{"quoted with escapes", `"a\"b\\c"`, `a"b\c`, true},
		{"quoted, one character", `"x"`, "x", true},
		{"bare, 255 characters", long, long, true},
		{"quoted, 255 characters after unquoting", `"` + long[:254] + `\\"`, long[:254] + `\`, true},
		{"empty", "", "", false},
		{"empty quoted string", `""`, "", false},
		{"bare, 256 characters", long + "k", "", false},
		{"quoted, 256 characters", `"` + long + `k"`, "", false},
		{"unclosed quote", `"abc`, "", false},
		{"a lone quote", `"`, "", false},
		{"escape at the end", `"abc\`, "", false},
		{"another escape", `"a\nb"`, "", false},
		{"characters after the closing quote", `"abc"x`, "", false},
		{"a Structured Field parameter", `"abc";a=1`, "", false},
		{"two strings", `"a", "b"`, "", false},
		{"bare with a space", "a b", "", false},
		{"bare with a tab", "a\tb", "", false},
		{"bare with a quote", `a"b`, "", false},
		{"bare with a backslash", `a\b`, "", false},
		{"bare, non-ASCII", "clé", "", false},
		{"quoted, non-ASCII", `"clé"`, "", false},
		{"quoted, a control character", "\"a\x01b\"", "", false},
		{"bare, DEL", "a\x7fb", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, ok := parseKey(tc.value)
			if ok != tc.ok || key != tc.key {
				t.Errorf("parseKey(%q) = %q, %v; want %q, %v", tc.value, key, ok, tc.key, tc.ok)
			}
		})
	}
}
