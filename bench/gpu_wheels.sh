# Sourced by bench/gpu_session.sh and bench/gpu_concurrent.sh: installs the
# carried wheels (`.whl/`, BUILD.md "A GPU machine without network access")
# into /tmp/site and exports PYTHONPATH (the repository and that site);
# nothing to install when `.whl/` is absent or NO_WHEELS=1 (a full install
# needs none). `.whl/optional/` (tokamax and its dependencies) goes, best
# effort, into OPTIONAL_SITE, which bench/xent_kernel.py appends to the end
# of sys.path, so it never shadows an installed package. Returns 1 when
# the wheels do not install.
if [ -z "${NO_WHEELS:-}" ] && compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
  if compgen -G ".whl/optional/*.whl" > /dev/null; then   # tokamax: may fail
    python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target /tmp/site-optional \
      .whl/optional/*.whl || echo "optional wheels not installed"
    export OPTIONAL_SITE=/tmp/site-optional   # bench/xent_kernel.py appends it
  fi
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
