#!/bin/sh
# The image's entrypoint (under tini): secrets given as files become the variables the server reads, then
# `mcp-code-mode "$@"` replaces this shell.
#
# CODE_MODE_<NAME>_FILE=/run/secrets/x sets CODE_MODE_<NAME> to the file's content (trailing newlines
# dropped) and is then unset, so the server never sees an unknown setting; PGPASSWORD_FILE sets PGPASSWORD
# (libpq's password, for a CODE_MODE_DATABASE_URL without one). CODE_MODE_ENV_FILE is a setting of its own
# (a .env file) and is left as it is. Setting both NAME and NAME_FILE is an error.
set -eu

names=$(env | sed -n 's/^\(CODE_MODE_[A-Z0-9_]*\)_FILE=.*/\1/p; s/^\(PGPASSWORD\)_FILE=.*/\1/p')
for name in $names; do
    [ "${name}_FILE" = CODE_MODE_ENV_FILE ] && continue
    eval "path=\${${name}_FILE}"
    if eval "[ -n \"\${${name}+set}\" ]"; then
        echo "mcp-code-mode-entrypoint: both $name and ${name}_FILE are set; set one" >&2
        exit 2
    fi
    if [ ! -r "$path" ]; then
        echo "mcp-code-mode-entrypoint: ${name}_FILE: cannot read $path" >&2
        exit 2
    fi
    value=$(cat "$path")
    export "$name=$value"
    unset "${name}_FILE"
done

exec mcp-code-mode "$@"
