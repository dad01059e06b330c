"""A remote worker for Orrery, in Python's standard library only.

It speaks Connect's JSON protocol (a POST of JSON to
/orrery.v1.WorkerService/METHOD), so it needs no generated code:

    from orrery_worker import Worker

    w = Worker("http://127.0.0.1:8080", key, types=["invoice"])

    @w.handler("invoice")
    def invoice(task):
        return {"invoice": "INV-%s" % task.payload["customer"]}

    w.run()

A handler gets a Task (its payload, params, run, idempotency key) and
returns the step's output: a string, or any value json can write. It fails
by raising; Permanent(...) fails for good, any other exception may be
retried (the step's retry policy decides). While tasks run, a heartbeat
renews their leases; a task whose lease is lost or whose run is cancelled
has task.stop set (a threading.Event) for the handler to notice. The
ends of attempts that finish while a report is on its way go together in
the next one (one call, one transaction on the server).
"""

import json
import os
import queue
import socket
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

SERVICE = "/orrery.v1.WorkerService/"
MAX_ENDS = 500  # ends in one report: the server's bound


class Permanent(Exception):
    """A failure another attempt cannot fix: the step is not retried."""


class OrreryError(Exception):
    """An error answered by the server: code is Connect's (not_found, ...)."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code


class Task:
    """One attempt to run, as a claim answers it."""

    def __init__(self, raw):
        self.task_id = raw["taskId"]
        self.attempt_id = raw.get("attemptId", "")
        self.fencing_token = int(raw.get("fencingToken", 0))
        self.run_id = raw.get("runId", "")
        self.namespace = raw.get("namespace", "")
        self.job = raw.get("job", "")
        self.step = raw.get("step", "")
        self.attempt = raw.get("attempt", 0)
        self.type = raw.get("type", "")
        self.trigger = raw.get("trigger", "")
        self.scheduled_for = raw.get("scheduledFor", "")
        self.deadline = raw.get("deadline", "")
        self.idempotency_key = raw.get("idempotencyKey", "")
        self.params = json.loads(raw.get("paramsJson") or "{}")
        self.payload = json.loads(raw.get("payloadJson") or "null")
        self.stop = threading.Event()


class Worker:
    """Claims attempts of its types and runs them, up to concurrency at once."""

    def __init__(self, url, key, types, queues=("default",), name=None, concurrency=4, lease_seconds=30, namespaces=()):
        self.url = url.rstrip("/")
        self.key = key
        self.types = list(types)
        self.queues = list(queues)
        self.name = name or "%s-%d" % (socket.gethostname(), os.getpid())
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.namespaces = list(namespaces)
        self.handlers = {}
        self.running = {}  # task id -> Task
        self.lock = threading.Lock()
        self.free = threading.Semaphore(concurrency)
        self.stopping = threading.Event()
        self.ends = queue.Queue()  # (task, end) of attempts that ended, waiting for a report

    def handler(self, type_name):
        """Registers the decorated function as the handler of type_name."""

        def register(fn):
            self.handlers[type_name] = fn
            return fn

        return register

    def call(self, method, body, timeout=60):
        req = urllib.request.Request(self.url + SERVICE + method, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        if self.key:
            req.add_header("Authorization", "Bearer " + self.key)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return json.loads(res.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read())
            except ValueError:
                err = {"code": "unknown", "message": str(e)}
            raise OrreryError(err.get("code", "unknown"), err.get("message", ""))

    def run(self):
        """Works until stop() is called (or the process is interrupted)."""
        beat = threading.Thread(target=self._heartbeat, daemon=True)
        beat.start()
        threading.Thread(target=self._report, daemon=True).start()
        while not self.stopping.is_set():
            self.free.acquire()
            free = 1
            while free < self.concurrency and self.free.acquire(blocking=False):
                free += 1
            try:
                res = self.call("Claim", {"worker": self.name, "types": self.types, "queues": self.queues, "maxTasks": free,
                                          "waitSeconds": 20, "leaseSeconds": self.lease_seconds, "slots": self.concurrency,
                                          "namespaces": self.namespaces})
            except (OrreryError, OSError) as e:
                print("orrery worker: claim: %s" % e, file=sys.stderr, flush=True)
                for _ in range(free):
                    self.free.release()
                time.sleep(1)
                continue
            tasks = [Task(t) for t in res.get("tasks", [])]
            for _ in range(free - len(tasks)):
                self.free.release()
            for task in tasks:
                with self.lock:
                    self.running[task.task_id] = task
                threading.Thread(target=self._work, args=(task,), daemon=True).start()

    def stop(self):
        self.stopping.set()

    def _work(self, task):
        end = {"taskId": task.task_id, "fencingToken": str(task.fencing_token)}
        try:
            fn = self.handlers.get(task.type)
            if fn is None:
                raise Permanent("no handler for type %r in this worker" % task.type)
            out = fn(task)
            end["success"] = True
            end["output"] = out if isinstance(out, str) else ("" if out is None else json.dumps(out))
        except Permanent as e:
            end.update(success=False, error=str(e) or "permanent failure", retryable=False)
        except Exception as e:  # noqa: BLE001 - a handler's failure is the step's
            end.update(success=False, error="".join(traceback.format_exception_only(type(e), e)).strip()[:8000],
                       retryable=True)
        self.ends.put((task, end))

    def _report(self):
        """Reports the ends of attempts: one, or all that ended meanwhile."""
        while True:
            batch = [self.ends.get()]
            while len(batch) < MAX_ENDS:
                try:
                    batch.append(self.ends.get_nowait())
                except queue.Empty:
                    break
            self._send(batch)
            for task, _ in batch:  # its lease is renewed until its end is reported
                with self.lock:
                    self.running.pop(task.task_id, None)
                self.free.release()

    def _send(self, batch):
        for delay in (0, 1, 2, 4, 8):
            time.sleep(delay)
            try:
                res = self.call("Report", {"worker": self.name, "ends": [end for _, end in batch]})
                for (task, _), taken in zip(batch, res.get("acceptedEnds", [])):
                    if not taken:
                        print("orrery worker: report of %s refused: its attempt is no longer ours" % task.task_id,
                              file=sys.stderr, flush=True)
                return
            except OrreryError as e:
                print("orrery worker: report of %d ends: %s" % (len(batch), e), file=sys.stderr, flush=True)
                if e.code == "not_found" and len(batch) > 1:
                    for one in batch:  # one is no longer this worker's: the others alone, so that they are taken
                        self._send([one])
                    return
                if e.code in ("not_found", "invalid_argument", "permission_denied"):
                    return
            except OSError as e:
                print("orrery worker: report of %d ends: %s" % (len(batch), e), file=sys.stderr, flush=True)

    def _heartbeat(self):
        while not self.stopping.wait(self.lease_seconds / 3):
            with self.lock:
                held = list(self.running.values())
            try:
                res = self.call("Heartbeat", {"worker": self.name, "leaseSeconds": self.lease_seconds,
                                              "attempts": [{"taskId": t.task_id, "fencingToken": str(t.fencing_token)}
                                                           for t in held]}, timeout=self.lease_seconds / 3)
            except (OrreryError, OSError) as e:
                print("orrery worker: heartbeat: %s" % e, file=sys.stderr, flush=True)
                continue
            for s in res.get("stop", []):
                with self.lock:
                    task = self.running.get(s["taskId"])
                if task is not None:
                    print("orrery worker: stop %s: %s" % (task.task_id, s.get("reason")), file=sys.stderr, flush=True)
                    task.stop.set()
