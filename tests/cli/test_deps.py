"""scripts/deps.sh: with everything installed it says nothing and succeeds; when a package
is missing and it cannot use apt (not root) it names the exact command and exits 1."""
import os
import shutil
import subprocess
import tempfile

SCRIPT = os.path.join(os.environ["EMB_SOURCE_DIR"], "scripts", "deps.sh")


def test_all_installed_is_silent():
    r = subprocess.run(["bash", SCRIPT, "test"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""


def test_usage_error():
    r = subprocess.run(["bash", SCRIPT, "frobnicate"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "usage:" in r.stderr


def test_not_root_names_the_command():
    """As root, the script runs as the user nobody (setpriv); otherwise as the user running
    the test, who is not root either way."""
    as_user = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "as root, this test needs setpriv (util-linux) to run the script as " \
                        "another user"
        as_user = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = dict(os.environ, EMB_DEPS_EXTRA="emb-no-such-package")
    # a copy the unprivileged user can read wherever the checkout lives
    d = tempfile.mkdtemp()
    try:
        os.chmod(d, 0o755)
        script = os.path.join(d, "deps.sh")
        shutil.copy(SCRIPT, script)
        os.chmod(script, 0o755)
        r = subprocess.run([*as_user, "bash", script, "build"], capture_output=True, text=True,
                           env=env, cwd=d)
    finally:
        shutil.rmtree(d)
    assert r.returncode == 1
    assert "emb needs these Debian packages: emb-no-such-package" in r.stderr
    assert "apt-get update && apt-get install -y emb-no-such-package" in r.stderr
