package idemhttp

// maxKeyLength is the longest key idem_claim accepts (22023 beyond): refusing it here answers 400, not 503.
const maxKeyLength = 255

// parseKey reads one Idempotency-Key field value: a Structured Field String ("8e03978e-40d5-43e8": printable
// ASCII between double quotes, with \" and \\ the only escapes) or, as Stripe-style clients send it, a bare
// token of visible ASCII without " or \. Both forms of one key are the same key. ok is false for anything
// else: an empty value, an unclosed quote, another escape, characters after the closing quote (Structured
// Field parameters are not accepted), spaces or non-ASCII in a bare key, or a key outside 1-255 characters.
func parseKey(value string) (key string, ok bool) {
	if value == "" {
		return "", false
	}
	if value[0] != '"' {
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < '!' || c > '~' || c == '"' || c == '\\' {
				return "", false
			}
		}
		if len(value) > maxKeyLength {
			return "", false
		}
		return value, true
	}
	unquoted := make([]byte, 0, len(value))
	for i := 1; i < len(value); i++ {
		switch c := value[i]; {
		case c == '\\':
			i++
			if i == len(value) || (value[i] != '"' && value[i] != '\\') {
				return "", false
			}
			unquoted = append(unquoted, value[i])
		case c == '"':
			if i != len(value)-1 || len(unquoted) == 0 || len(unquoted) > maxKeyLength {
				return "", false
			}
			return string(unquoted), true
		case c < ' ' || c > '~':
			return "", false
		default:
			unquoted = append(unquoted, c)
		}
	}
	return "", false // no closing quote
}
