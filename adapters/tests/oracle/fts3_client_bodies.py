"""Print the FTS3 job bodies CERN's own FTS3 Python client (PyPI `fts3`) builds.

Reads a JSON list of cases on stdin; writes a JSON list of bodies, one per case, built by
`fts3.rest.client.easy.new_transfer` and `new_job` from the same inputs the broker's FTS3
adapter has. Used by `adapters/tests/fts3_client.rs` as the oracle for `fts3::job_body`.
Exits 3 with a message when the package is missing.
"""

import json
import sys

try:
    from fts3.rest.client.easy import new_job, new_transfer
except ImportError as e:  # the test turns this into a clear failure
    print("the fts3 client is not installed (python3 -m pip install fts3): %s" % e,
          file=sys.stderr)
    sys.exit(3)


def body(case):
    transfer = new_transfer(
        case["source"],
        case["destination"],
        checksum=None,            # the broker asks for no checksum
        filesize=case["filesize"],
        activity=case.get("activity"),
        metadata=case["metadata"],
        selection_strategy=None,  # one source: nothing to select
    )
    # `retry` is left at the client's default, -1: "no retries" (0 is the server default).
    return new_job(
        transfers=[transfer],
        bring_online=case.get("bring_online"),
        copy_pin_lifetime=case.get("copy_pin_lifetime"),
        archive_timeout=case.get("archive_timeout"),
        priority=case["priority"],
        metadata=case["metadata"],
        id_generator="deterministic",
        sid=case["sid"],
    )


print(json.dumps([body(c) for c in json.load(sys.stdin)]))
