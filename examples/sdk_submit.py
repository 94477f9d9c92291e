"""Submit a job with toposched's Python client, wait for it to end, and print its workers' logs.

    export PATH=$PWD/.venv/bin:$PATH          # with `toposched serve` running (make serve)
    python examples/sdk_submit.py --name sdk-hello --workers 2 --gpus 2

The server and the token are found as the CLI finds them: $TOPOSCHED_URL (default
http://127.0.0.1:8080), then $TOPOSCHED_TOKEN, else the admin token file of a server on this
machine. Exit status: 0 the job succeeded, 1 it did not, and the CLI's for a refused request
(2 bad input, 3 not found, 4 not allowed, 5 a taken name, 6 no server); see docs/sdk.md.
"""

from __future__ import annotations

import argparse
import sys
import time

from toposched.client import UNREACHABLE, ApiError, Client

ENDED = {"succeeded", "failed", "cancelled"}
EXIT = {UNREACHABLE: 6, 401: 4, 403: 4, 404: 3, 409: 5, 413: 2, 422: 2}

# Each worker prints what toposched gave it. sys.executable: the server runs on this machine and
# starts the workers there; for a server elsewhere, name a Python that machine has.
WORKER = (
    "import os; e = os.environ; "
    "print('rank', e['RANK'], 'of', e['WORLD_SIZE'], 'on GPUs', e['CUDA_VISIBLE_DEVICES'])"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", help="the job's name (default: made up by the server)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per worker")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="how long to wait")
    args = parser.parse_args()
    spec = {
        "name": args.name,
        "workers": args.workers,
        "gpus": args.gpus,
        "command": [sys.executable, "-c", WORKER],  # a list: the API splits no string
    }
    try:
        # on_retry: told of each retry (the server busy, or an answer lost), to say so.
        with Client.from_env(on_retry=lambda line: print(line, file=sys.stderr)) as c:
            job = c.submit(spec)  # one idempotency key for every try: never two jobs
            name = job["name"]
            print(f"submitted {name}: {job['state']} ({job['reason']})")
            deadline = time.monotonic() + args.timeout_s
            while job["state"] not in ENDED:
                if time.monotonic() > deadline:
                    late = f"{name} is still {job['state']} after {args.timeout_s:g} s"
                    print(late, file=sys.stderr)
                    return 1
                time.sleep(0.5)
                job = c.job(name)
            print(f"{name}: {job['state']} ({job['reason']})")
            for slot in job["placement"]:
                text = b"".join(c.logs(name, worker=slot["worker"])).decode(errors="replace")
                print(f"--- worker {slot['worker']} on {slot['node']} GPUs {slot['gpus']}")
                print(text, end="")
    except ApiError as err:
        print(f"error: {err}", file=sys.stderr)  # the server's words, one line per bad field
        return EXIT.get(err.status, 1)
    return 0 if job["state"] == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
