"""A throw-away PostgreSQL cluster on 127.0.0.1 (Debian's postgresql binaries), for the tests
and benchmarks of many workers on one study. Password auth over TCP is really checked."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def pg_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    return Path(dirs[-1]) if dirs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    def __init__(self, password: str, user: str = "tuner"):
        bindir = pg_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL binaries not found (apt-get install postgresql)")
        self.bin, self.user, self.password = bindir, user, password
        # A directory of its own under /tmp: the server's user must be able to reach it (pytest's
        # tmp_path sits under a 0700 directory of ours).
        self.root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
        self.root.chmod(0o777)
        self.data = self.root / "data"
        # initdb refuses to run as root: run the server as the postgres user then.
        self.as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.port = _free_port()
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=scram-sha-256")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"), "-w", "-o",
                  f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
                  "-c max_connections=200 -c fsync=off", "start")
        self.admin(f"CREATE ROLE {user} LOGIN PASSWORD '{password}'")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_pg, str(self.bin / tool), *args], check=True, capture_output=True)

    def admin(self, sql: str) -> None:
        self._run("psql", "-h", str(self.data), "-p", str(self.port), "-U", "postgres",
                  "-v", "ON_ERROR_STOP=1", "-qc", sql)

    def url_for(self, db: str) -> str:
        self.admin(f"CREATE DATABASE {db} OWNER {self.user}")
        return f"postgresql+psycopg://{self.user}:{self.password}@127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        subprocess.run([*self.as_pg, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m",
                        "immediate", "stop"], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
