"""gunicorn settings for the sample app (serve.sh gives the rest on its command line)."""
import ctypes
import os
import signal

# The app (Django, and the tables wsgi.py makes) is loaded before the port is bound, so a client that finds the
# port open is served at once, as by the other sample apps, not queued behind a worker still importing Django
# (which let a duplicate overtake its first request). wsgi.py closes its connection before the worker forks.
preload_app = True
# gunicorn 27's control socket would be $HOME/.gunicorn/gunicorn.ctl, one path for every server on the machine.
control_socket_disable = True

PR_SET_PDEATHSIG = 1


def post_fork(server, worker):
    """The worker dies with the master (Linux's parent-death signal), so a SIGKILL of the master, the pid serve.sh
    execs, ends the request in flight and its database transaction, as a crash of the whole server would. Without
    it the worker would finish the request, answer it, and only then notice its parent had gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != server.pid:  # the master died before the signal was armed
        os._exit(1)
