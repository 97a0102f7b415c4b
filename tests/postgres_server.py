"""A throwaway PostgreSQL server for tests: initdb and pg_ctl under a temp dir, on a free loopback port.

PostgreSQL refuses to run as root: as root the server runs as the `postgres`
user and its folder belongs to that user. Run this file to start one by hand
(it prints the URL and stops the server on Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER, PASSWORD = "pipedeck", "tuning-secret"  # the superuser initdb creates; TCP logins need the password
RUN_AS = "postgres"  # the account that runs the server when the tests run as root


def unavailable() -> str | None:
    """Why no throwaway server can start here, or None when one can."""
    missing = [name for name in ("initdb", "pg_ctl") if shutil.which(name) is None]
    if missing:
        return f"PostgreSQL's {' and '.join(missing)} not on PATH"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root needs a {RUN_AS!r} user to run PostgreSQL (it refuses to run as root)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One server: `start()`, `url(database)`, `create_database(name)`, `stop()` (also after a failed start)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pipedeck-pg-"))
        self.data, self.log = self.root / "data", self.root / "server.log"
        self.port = free_port()
        self.started = False

    def _run(self, *argv: str) -> None:
        command = [shutil.which(argv[0]) or argv[0], *argv[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", RUN_AS, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")

    def start(self) -> PostgresServer:
        secret = self.root / "password"
        secret.write_text(PASSWORD)
        if os.geteuid() == 0:
            account = pwd.getpwnam(RUN_AS)
            for path in (self.root, secret):
                os.chown(path, account.pw_uid, account.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={secret}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
        )
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        self.started = True
        return self

    def url(self, database: str, password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.started:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            self.started = False
        shutil.rmtree(self.root, ignore_errors=True)


if __name__ == "__main__":
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the server on kill as on Ctrl-C
    server = PostgresServer()
    try:
        server.start()
        print(server.url("postgres"), flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
