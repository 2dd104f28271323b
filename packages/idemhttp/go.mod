module github.com/idem-keys/idemhttp

// pgx 5.9's own minimum; the code itself needs Go 1.21.
go 1.26.0

// pgx v5 at the version Debian sid ships (golang-github-jackc-pgx-v5-dev); the rest are its requirements.
require github.com/jackc/pgx/v5 v5.9.2

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.2 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.29.0 // indirect
)
