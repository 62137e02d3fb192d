# Scenario S4: checkpoint and resume. Run A trains 3 steps, saves state (TTL) and sampler weights,
# trains 3 more; run B resumes with optimizer (same losses), run C without (step 4 same, 5-6 differ).
# Plus weights_info, training-run metadata, checkpoint listings, archive download (one-time URL),
# delete, malformed paths, publish/unpublish and ttl.
import io
import json
import os
import struct
import tarfile
import time

import numpy as np

from harness import (BUILTIN_MODEL, check, check_close, expect_status, expect_user_error, new_client,
                     rel_close, sft_batch)

LR = 1e-2
TTL = 604800
METADATA = {"renderer_name": "role_colon"}


def run_a(wire, batch):
    tc = new_client(wire, rank=8, seed=0, user_metadata=METADATA)
    tc.train(batch, [LR] * 3)
    sp = tc.save_state("000003", ttl_seconds=TTL)
    check(sp == "tinker://%s/weights/000003" % tc.model_id, "save_state path %r" % sp)
    sampler = tc.save_weights_for_sampler("000003")["path"]
    check(sampler == "tinker://%s/sampler_weights/000003" % tc.model_id, "sampler path %r" % sampler)
    losses = tc.train(batch, [LR] * 3)
    return tc, sp, sampler, losses


def resume(wire, sp, batch, optimizer):
    info = wire.weights_info(sp)
    tc = new_client(wire, base_model=info["base_model"], rank=info["lora_rank"])
    check(tc.seq == 0, "fresh client")
    res = tc.load_state(sp, optimizer=optimizer)
    check(isinstance(res, dict), "load_weights result %r" % (res,))
    return tc, tc.train(batch, [LR] * 3)


def check_metadata(wire, tc, sp):
    info = wire.weights_info(sp)
    check(info.get("base_model") == BUILTIN_MODEL and info.get("is_lora") is True
          and info.get("lora_rank") == 8, "weights_info %r" % info)
    run = wire.get_training_run(tc.model_id)
    check(run.get("training_run_id") == tc.model_id, "training run id %r" % run)
    check(run.get("base_model") == BUILTIN_MODEL and run.get("is_lora") is True
          and run.get("lora_rank") == 8, "training run fields %r" % run)
    check("last_request_time" in run and "model_owner" in run, "training run lacks required fields %r" % run)
    check(run.get("user_metadata") == METADATA, "user_metadata round trip: %r" % run.get("user_metadata"))
    check((run.get("last_checkpoint") or {}).get("checkpoint_id") == "weights/000003",
          "last_checkpoint %r" % run.get("last_checkpoint"))
    check((run.get("last_sampler_checkpoint") or {}).get("checkpoint_id") == "sampler_weights/000003",
          "last_sampler_checkpoint %r" % run.get("last_sampler_checkpoint"))
    check(run.get("corrupted") in (None, False), "corrupted %r" % run.get("corrupted"))
    runs = wire.list_training_runs(limit=100)
    check(isinstance(runs.get("cursor"), dict) and runs["cursor"].get("total_count") == len(runs["training_runs"]),
          "cursor %r for %d runs" % (runs.get("cursor"), len(runs["training_runs"])))
    check(tc.model_id in [r["training_run_id"] for r in runs["training_runs"]], "run not listed")


def checkpoints_by_id(listing):
    return {c["checkpoint_id"]: c for c in listing["checkpoints"]}


def check_listings(wire, tc, sp, sampler):
    cks = checkpoints_by_id(wire.list_checkpoints(tc.model_id))
    check({"weights/000003", "sampler_weights/000003"} <= set(cks), "checkpoints %r" % list(cks))
    w, s = cks["weights/000003"], cks["sampler_weights/000003"]
    check(w["checkpoint_type"] == "training" and s["checkpoint_type"] == "sampler", "types %r" % cks)
    check(w["tinker_path"] == sp and s["tinker_path"] == sampler, "tinker_path %r" % cks)
    check(w.get("expires_at"), "TTL'd checkpoint lacks expires_at: %r" % w)
    check(s.get("expires_at") is None, "checkpoint without TTL has expires_at: %r" % s)
    check("time" in w and "time" in s, "checkpoint lacks time")
    mine = checkpoints_by_id(wire.list_user_checkpoints())
    check({"weights/000003", "sampler_weights/000003"} <= set(mine), "user checkpoints %r" % list(mine))


def tar_files(blob):
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tf:
        return {os.path.basename(m.name): tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}


def check_peft(files, rank):
    """adapter_config.json is a PEFT LoRA config; the safetensors hold base_model.model.* lora_A/B
    tensors, and the trained lora_B tensors are not all zero."""
    cfg = json.loads(files["adapter_config.json"])
    check(cfg.get("peft_type") == "LORA" and cfg.get("r") == rank, "adapter_config %r" % cfg)
    check(cfg.get("base_model_name_or_path") == BUILTIN_MODEL, "adapter base model %r" % cfg)
    blob = files["adapter_model.safetensors"]
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    names = [k for k in header if k != "__metadata__"]
    check(names and all(k.startswith("base_model.model.") for k in names), "tensor names %r" % names[:4])
    b_names = [k for k in names if ".lora_B." in k]
    check(b_names and len(b_names) * 2 == len(names), "lora_A/lora_B pairs: %r" % names[:4])
    nonzero = 0
    for k in b_names:
        t = header[k]
        lo, hi = t["data_offsets"]
        check(t["dtype"] == "F32", "%s dtype %s" % (k, t["dtype"]))
        nonzero += int(np.any(np.frombuffer(blob[8 + n + lo:8 + n + hi], dtype="<f4") != 0))
    check(nonzero > 0, "every lora_B tensor is zero after training")


def check_archive(wire, path):
    url = wire.archive_url(path)
    r = wire.fetch_url(url)
    check(r.status == 200, "archive download HTTP %d: %r" % (r.status, r.body[:200]))
    files = tar_files(r.body)
    want = {"adapter_config.json", "adapter_model.safetensors", "checkpoint_complete"}
    check(want <= set(files), "archive of %s holds %s" % (path, sorted(files)))
    check_peft(files, 8)
    again = wire.fetch_url(url)
    check(400 <= again.status < 500, "second GET of the one-time URL: HTTP %d" % again.status)
    return len(r.body)


def check_publish_ttl(wire, tc, sampler):
    wire.publish(sampler)
    check(checkpoints_by_id(wire.list_checkpoints(tc.model_id))["sampler_weights/000003"].get("public")
          is True, "published checkpoint not public")
    wire.unpublish(sampler)
    check(checkpoints_by_id(wire.list_checkpoints(tc.model_id))["sampler_weights/000003"].get("public")
          is False, "unpublished checkpoint still public")
    wire.set_ttl(sampler, 3600)
    check(checkpoints_by_id(wire.list_checkpoints(tc.model_id))["sampler_weights/000003"].get("expires_at"),
          "ttl PUT did not set expires_at")
    wire.set_ttl(sampler, None)
    check(checkpoints_by_id(wire.list_checkpoints(tc.model_id))["sampler_weights/000003"].get("expires_at")
          is None, "ttl PUT null did not clear expires_at")


def check_delete_and_bad_paths(wire, tc, sp, batch):
    rolling = tc.save_state("rolling")
    wire.delete_checkpoint(rolling)
    check("weights/rolling" not in checkpoints_by_id(wire.list_checkpoints(tc.model_id)), "deleted still listed")
    expect_status(lambda: wire.weights_info(rolling), (400, 404, 422), "weights_info of a deleted checkpoint")
    fresh = new_client(wire, rank=8)
    expect_user_error(lambda: fresh.load_state(rolling, optimizer=True), "load of a deleted checkpoint")
    bad = sp + "/extra"
    expect_status(lambda: wire.weights_info(bad), (400, 404, 422), "weights_info with an extra segment")
    fresh2 = new_client(wire, rank=8)
    expect_user_error(lambda: fresh2.load_state(bad), "load_weights with an extra segment")


def check_resumes(wire, sp, batch, a):
    _, b = resume(wire, sp, batch, optimizer=True)
    check_close(b, a, 1e-5, "resume with optimizer: losses of steps 4-6")
    _, c = resume(wire, sp, batch, optimizer=False)
    check_close(c[0], a[0], 1e-5, "resume without optimizer: step-4 loss")
    check(not rel_close(c[1:], a[1:], 1e-4), "resume without optimizer: steps 5-6 should differ: %r vs %r"
          % (c, a))
    return c


def check_overwrite_and_expiry(wire, batch):
    """A second save under one name needs overwrite=True (else a user error, never 409); a checkpoint
    saved with ttl_seconds=1 disappears once it expires."""
    tc = new_client(wire, rank=8)
    tc.train(batch, [LR])
    first = tc.save_state("same")
    expect_user_error(lambda: tc.save_state("same"), "save_state twice under one name")
    again = tc.save_state_async("same", overwrite=True).result()["path"]
    check(again == first, "overwrite path %r vs %r" % (again, first))
    short = tc.save_state("short", ttl_seconds=1)
    check(checkpoints_by_id(wire.list_checkpoints(tc.model_id))["weights/short"].get("expires_at"), "ttl 1")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "weights/short" in checkpoints_by_id(wire.list_checkpoints(tc.model_id)):
        time.sleep(0.5)
    check("weights/short" not in checkpoints_by_id(wire.list_checkpoints(tc.model_id)),
          "checkpoint with ttl_seconds=1 still listed after 10 s")
    expect_status(lambda: wire.weights_info(short), (400, 404, 422), "weights_info of an expired checkpoint")
    tc.forward(batch)  # the model is unaffected


def check_pagination(wire):
    runs = wire.list_training_runs(limit=100)
    total = runs["cursor"]["total_count"]
    check(total >= 2, "expected several runs, got %d" % total)
    page = wire.list_training_runs(limit=1, offset=1)
    check(len(page["training_runs"]) == 1 and page["cursor"].get("total_count") == total
          and page["cursor"].get("offset") == 1 and page["cursor"].get("limit") == 1, "page %r" % page)
    check(page["training_runs"][0]["training_run_id"] == runs["training_runs"][1]["training_run_id"],
          "offset 1 is not the second run")


def check_used_model_load(tc, sp):
    expect_user_error(lambda: tc.load_state(sp, optimizer=True), "load_weights on a used model")


def run(ctx):
    srv = ctx.start_server()
    wire = srv.wire()
    wire.client_config()
    batch = sft_batch(seed=2)
    tc, sp, sampler, a = run_a(wire, batch)
    ctx.case("weights_info, training run, user_metadata", check_metadata, wire, tc, sp)
    ctx.case("checkpoint listings (kinds, expires_at)", check_listings, wire, tc, sp, sampler)
    c = ctx.case("resume with / without optimizer", check_resumes, wire, sp, batch, a)
    size = ctx.case("archive of the sampler checkpoint (one-time URL)", check_archive, wire, sampler)
    ctx.case("archive of the training checkpoint", check_archive, wire, sp)
    ctx.case("publish / unpublish / ttl", check_publish_ttl, wire, tc, sampler)
    ctx.case("delete; malformed paths", check_delete_and_bad_paths, wire, tc, sp, batch)
    ctx.case("save name reuse needs overwrite; ttl expiry", check_overwrite_and_expiry, wire, batch)
    ctx.case("training run pagination", check_pagination, wire)
    ctx.case("load_weights on a used model is refused", check_used_model_load, tc, sp)
    ctx.finish()
    return "A %s; B == A; C differs at 5-6 (%s); archive %s bytes" % (
        ["%.4f" % x for x in a], ["%.4f" % x for x in c], size)
