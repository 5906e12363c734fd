"""Small helpers the benchmark scripts share (imported from the script's own directory)."""
import socket
import subprocess
import time


def wait(port, t=10):
    """Whether something accepts on 127.0.0.1:`port` within `t` seconds."""
    end = time.time() + t
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def sh(*argv, timeout=60):
    """Runs a command quietly; raises if it fails."""
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
