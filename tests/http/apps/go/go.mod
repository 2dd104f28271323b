// The sample app's module. setup.sh builds with a copy of this file that also requires github.com/idem-keys/idemhttp
// at the version of its artefact (packages/idemhttp/dist.sh), resolved offline (packages/idemhttp/modenv.sh).
module idem-keys.test/http/apps/go

go 1.25.0

require github.com/jackc/pgx/v5 v5.9.2
