# Sourced by bench/gpu_session.sh and bench/gpu_concurrent.sh: installs the
# carried wheels (`.whl/`, BUILD.md "A GPU machine without network access")
# into /tmp/site and exports PYTHONPATH (the repository and that site);
# nothing to install when `.whl/` is absent or NO_WHEELS=1 (a full install
# needs none). `.whl/optional/` (tokamax and its dependencies) goes, best
# effort, into OPTIONAL_SITE, which bench/xent_kernel.py appends to the end
# of sys.path, so it never shadows an installed package. Wheels installed
# there by an earlier call on the same warm machine (the same files, by
# name and size) are not installed again. Returns 1 when the wheels do not
# install.
if [ -z "${NO_WHEELS:-}" ] && compgen -G ".whl/*.whl" > /dev/null; then
  optional=$(compgen -G ".whl/optional/*.whl")   # tokamax: may fail
  # the same wheels installed by an earlier call on this warm machine: kept
  stamp=$(stat -c "%n %s" .whl/*.whl $optional | md5sum)
  if [ "$(cat /tmp/site/.qkspec_wheels 2> /dev/null)" != "$stamp" ]; then
    rm -f /tmp/site/.qkspec_wheels
    python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
    if [ -n "$optional" ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target /tmp/site-optional \
        .whl/optional/*.whl || echo "optional wheels not installed"
    fi
    echo "$stamp" > /tmp/site/.qkspec_wheels
  fi
  if [ -n "$optional" ]; then
    export OPTIONAL_SITE=/tmp/site-optional   # bench/xent_kernel.py appends it
  fi
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
