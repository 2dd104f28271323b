module github.com/idem-keys/idemhttp

go 1.19

// The versions Debian 12 ships (golang-github-jackc-pgx-v4-dev, -pgconn-dev, -pgproto3-v2-dev): the package is
// built and tested against those, in GOPATH mode (see README.md).
require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgproto3/v2 v2.2.0
	github.com/jackc/pgx/v4 v4.15.0
)
