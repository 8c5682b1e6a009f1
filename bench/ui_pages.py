"""The web pages: first paint and bytes of the box page and of a job page, and trainqd's CPU
with ten live pages open against none, in headless chromium through a real `trainq ui`.

    .venv/bin/python bench/ui_pages.py [--jobs 1000] [--runs 5] [--seconds 30]

trainqd has 8 fake GPUs and `--jobs` jobs (8 running, the rest waiting). Each page load is
a fresh browser context (no cache, no token kept: the page's address with the token).
Times come from the browser's own performance entries: first contentful paint, and when
the page's data is drawn (its table in the DOM). The baseline, in the same run, is the
same browser loading a static text file from the same daemon through the same forwarder.
A page's address carries the token as `trainq ui` prints it, after the page's route.
Bytes are the transfer sizes of the page and everything it fetched, the event stream
excepted (it never ends). The CPU is trainqd's user+system time (from /proc) over the same
period with no page open, then with ten box pages open and live (ten browser contexts, as
ten people: a browser keeps at most six connections to one host, and a live page holds one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

from common import Summary, load, machine, ratio, running_daemon, trainq_argv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.ui import CHROMIUM, CHROMIUM_ARGS

_MEASURE = """() => {
  const paint = performance.getEntriesByName("first-contentful-paint")[0];
  const entries = [...performance.getEntriesByType("navigation"),
                   ...performance.getEntriesByType("resource")]
    .filter((e) => !e.name.includes("/v1/events"));
  return { paint: paint ? paint.startTime : null, drawn: performance.now(),
           bytes: entries.reduce((sum, e) => sum + e.transferSize, 0) };
}"""


def load_page(browser: Browser, url: str, selector: str) -> dict[str, float]:
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector(selector)
    measured: dict[str, float] = page.evaluate(_MEASURE)
    context.close()
    return measured


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    print(machine())
    with running_daemon(gpus="fake:8", gpu_sample_seconds=5) as daemon, daemon.client() as api:
        specs = [{"command": ["sleep", "3600"], "gpus": 1} for _ in range(args.jobs)]
        group = api.json("POST", "/v1/jobs", specs, expect=201)
        job_id = group["jobs"][0]["id"]
        forwarder = subprocess.Popen(
            [*trainq_argv(), "--socket", str(daemon.socket), "ui"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert forwarder.stdout is not None
            url = forwarder.stdout.readline().split(": ", 1)[1].strip()
            base, token = url.split("#")  # http://127.0.0.1:P/ui/, token=...
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                pages = {
                    "static file (baseline)": (
                        f"{base}uplot.LICENSE",
                        "body",
                    ),
                    "box page": (f"{base}#/box&{token}", "#gpus tr[data-gpu]"),
                    "job page": (f"{base}#/job/{job_id}&{token}", "#attempts tr"),
                    "queue page": (f"{base}#/queue&{token}", "#queue tr[data-job]"),
                }
                results: dict[str, list[dict[str, float]]] = {name: [] for name in pages}
                for _ in range(args.runs):
                    for name, (address, selector) in pages.items():
                        results[name].append(load_page(browser, address, selector))
                base_paint = Summary.of([r["paint"] for r in results["static file (baseline)"]])
                print(f"\n{args.jobs} jobs, 8 fake GPUs, {args.runs} loads each; {load()}")
                print("| page | first paint, median | data drawn, median | bytes | vs baseline |")
                print("|---|---|---|---|---|")
                for name, runs in results.items():
                    paint = Summary.of([r["paint"] for r in runs])
                    drawn = Summary.of([r["drawn"] for r in runs])
                    size = Summary.of([r["bytes"] for r in runs])
                    versus = ratio(paint.median, base_paint.median)
                    print(
                        f"| {name} | {paint.median:.0f} ms | {drawn.median:.0f} ms "
                        f"| {size.median / 1024:.1f} KiB | {versus} |"
                    )

                assert daemon.proc is not None
                pid = daemon.proc.pid
                before = cpu_seconds(pid)
                time.sleep(args.seconds)
                idle = cpu_seconds(pid) - before
                # Ten viewers, each a context of its own: one browser opens at most six
                # HTTP/1.1 connections to a host, and each live page holds one.
                live = [browser.new_context().new_page() for _ in range(10)]
                for page in live:
                    page.goto(f"{base}#/box&{token}")
                    page.wait_for_selector("#gpus tr[data-gpu]")
                before = cpu_seconds(pid)
                time.sleep(args.seconds)
                busy = cpu_seconds(pid) - before
                print(
                    f"\ntrainqd CPU over {args.seconds:g} s: {idle:.2f} s with no page open, "
                    f"{busy:.2f} s with ten live box pages: {ratio(busy, idle)}"
                )
                browser.close()
        finally:
            forwarder.terminate()
            forwarder.wait()


if __name__ == "__main__":
    main()
