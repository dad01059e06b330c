"""An example remote worker: it runs the steps of type `invoice`
(examples/remote-invoice.yaml). Start it beside `make dev`:

    ORRERY_URL=http://127.0.0.1:8080 ORRERY_KEY=ork_... python3 examples/workers/python/example.py

ORRERY_KEY is a worker key: orrery keys create --principal py --role worker --type invoice.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from orrery_worker import Permanent, Worker  # noqa: E402

w = Worker(os.environ.get("ORRERY_URL", "http://127.0.0.1:8080"), os.environ.get("ORRERY_KEY", ""), types=["invoice"],
           name=os.environ.get("ORRERY_WORKER_NAME"),
           concurrency=int(os.environ.get("ORRERY_CONCURRENCY", "4")), lease_seconds=int(os.environ.get("ORRERY_LEASE_SECONDS", "30")))


@w.handler("invoice")
def invoice(task):
    customer = task.payload.get("customer") if isinstance(task.payload, dict) else None
    if customer is None:
        raise Permanent("the payload names no customer")
    # A handler that runs long checks task.stop: set when its lease is lost
    # or its run was cancelled.
    for _ in range(int(task.payload.get("seconds", 0) * 10)):
        if task.stop.is_set():
            raise Exception("stopped: " + task.step)
        time.sleep(0.1)
    return {"invoice": "INV-%s-%s" % (customer, task.run_id[:8]), "region": task.params.get("region", "eu"),
            "idempotency_key": task.idempotency_key}


if __name__ == "__main__":
    print("orrery example worker %s: serving type invoice" % w.name, file=sys.stderr, flush=True)
    try:
        w.run()
    except KeyboardInterrupt:
        pass
