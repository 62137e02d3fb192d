# Child process of scenario_load: holds one raw asyncio keep-alive connection per request id and keeps
# a retrieve_future long-poll outstanding on each (re-polling at once, as the SDK does) until told to
# stop; checks every answer is a valid try_again or result, and reports counts through a queue.
import asyncio
import json
import time

HEADERS = ("User-Agent: AsyncTinker/Python 0.25.0\r\nContent-Type: application/json\r\n"
           "Accept: application/json\r\nX-Tinker-Request-Type: ForwardBackward\r\n"
           "x-stainless-read-timeout: 45\r\n")


def build_request(host, port, api_key, rid, iteration):
    body = json.dumps({"request_id": rid, "allow_metadata_only": True}).encode()
    head = ("POST /api/v1/retrieve_future HTTP/1.1\r\nHost: %s:%d\r\nX-API-Key: %s\r\n%s"
            "X-Tinker-Request-Iteration: %d\r\nContent-Length: %d\r\n\r\n"
            % (host, port, api_key, HEADERS, iteration, len(body)))
    return head.encode() + body


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "content-length" not in headers:
        raise ValueError("no Content-Length (chunked answers not expected): %r" % headers)
    body = await reader.readexactly(int(headers["content-length"]))
    return status, headers, body


def classify(status, headers, body):
    """'try_again', 'result', or an error string."""
    if status != 200:
        return "HTTP %d %r" % (status, body[:120])
    if "application/json" not in headers.get("content-type", ""):
        return "result" if "protobuf" in headers.get("content-type", "") else "bad content-type"
    obj = json.loads(body)
    if obj.get("type") == "try_again":
        return "try_again"
    return "error future %r" % obj if "error" in obj else "result"


async def hold(host, port, api_key, rid, stats, stop, ready):
    reader, writer = await asyncio.open_connection(host, port)
    it = 0
    try:
        while True:
            writer.write(build_request(host, port, api_key, rid, it))
            await writer.drain()
            if it == 0:
                stats["sent_first"] += 1
                if stats["sent_first"] == stats["want"]:
                    ready.set()
            t0 = time.monotonic()
            kind = classify(*await read_response(reader))
            stats["max_hold"] = max(stats["max_hold"], time.monotonic() - t0)
            stats[kind if kind in ("try_again", "result") else "invalid"] += 1
            if kind not in ("try_again", "result"):
                stats["examples"].append(kind)
            it += 1
            if stop.is_set() or kind != "try_again":
                break
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        stats["invalid"] += 1
        stats["examples"].append("%s: %s" % (type(e).__name__, e))
    finally:
        writer.close()


async def run_all(host, port, api_key, ids, stop, ready):
    stats = {"want": len(ids), "sent_first": 0, "try_again": 0, "result": 0, "invalid": 0,
             "max_hold": 0.0, "examples": []}
    tasks = []
    for i in range(0, len(ids), 100):  # connect in waves to stay under the listen backlog
        for rid in ids[i:i + 100]:
            tasks.append(asyncio.ensure_future(hold(host, port, api_key, rid, stats, stop, ready)))
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    stats["examples"] = stats["examples"][:5]
    return stats


def main(host, port, api_key, ids, stop, ready, out):
    try:
        out.put(asyncio.run(run_all(host, port, api_key, ids, stop, ready)))
    except Exception as e:  # reported to the parent
        out.put({"crash": "%s: %s" % (type(e).__name__, e)})
