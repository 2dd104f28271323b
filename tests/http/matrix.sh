# Sourced by run.sh and setup.sh: where each sample app's two ends run (scripts/stacks.sh), and which packages'
# own tests run on which stacks (tests/http/README.md, "Both ends of every range").
#   newest[APP]   the stack of the newest end: every rule, both modes, both editions
#   oldest[APP]   the stack of the oldest end (bookworm itself): every rule, the transactional mode, the extension;
#                 empty when there is none (Go: pgx v5 is not on bookworm, and pgx v4 is no longer supported)
# shellcheck disable=SC2034 # read by the scripts that source this
declare -A newest=([go]=sid [python]=trixie [node]=trixie [django]=trixie [rails]=trixie [rack]=trixie)
declare -A oldest=([go]="" [python]=host [node]=host [django]=host [rails]=host [rack]=host)
ALL_APPS="go python node django rails rack"
# The package under each app, and the stacks each package's own tests run on.
declare -A package=([go]=idemhttp [python]=idem-keys-asgi [node]=idem-keys-express [rails]=idem_keys-rack
                    [rack]=idem_keys-rack [django]=idem-keys-django)
declare -A package_stacks=([idemhttp]="sid" [idem-keys-core]="host trixie" [idem-keys-asgi]="host trixie"
                           [idem-keys-express]="host trixie" [idem_keys-rack]="host trixie"
                           [idem-keys-django]="host trixie")

# matrix_apps APP...: APP@STACK for both ends of each app named (all six when none).
matrix_apps() {
  local lang
  (($#)) || set -- $ALL_APPS
  for lang in "$@"; do
    [ -n "${newest[$lang]:-}" ] || { echo "tests/http: unknown app $lang (one of: $ALL_APPS)" >&2; return 2; }
    echo "$lang@${newest[$lang]}"
    [ -z "${oldest[$lang]}" ] || echo "$lang@${oldest[$lang]}"
  done
}
