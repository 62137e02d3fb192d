# REST through the official SDK's RestClient: training runs (fields, user_metadata, last checkpoints,
# pagination), checkpoint listings (kinds, tinker paths, expires_at only with a TTL), the user's
# checkpoints, weights info, publish / unpublish, set TTL and clear it, a TTL that expires, delete,
# sessions and samplers, and the archive download (SDK 0.25's get_checkpoint_archive_url: a PEFT
# adapter in a tar, the URL good once). SDK 0.38 dropped the archive call; it is noted, not faked.
import io
import json
import os
import struct
import tarfile
import time
import urllib.error
import urllib.request

import numpy as np

import sdk_common as sdk
from harness import BUILTIN_MODEL, check

LR = 1e-2
METADATA = {"renderer_name": "role_colon"}


def by_id(listing):
    return {c.checkpoint_id: c for c in listing.checkpoints}


def setup(svc, batch):
    tc = sdk.new_training_client(svc, rank=8, seed=0, user_metadata=METADATA)
    sdk.train(tc, batch, [LR] * 2)
    sp = tc.save_state("000002", ttl_seconds=604800).result().path
    sampler = tc.save_weights_for_sampler("000002").result().path
    return tc, tc.get_info().model_id, sp, sampler


def check_training_run(rc, run_id, sp):
    run = rc.get_training_run(run_id).result()
    check(run.training_run_id == run_id and run.base_model == BUILTIN_MODEL and run.is_lora
          and run.lora_rank == 8, "training run %r" % run)
    check(run.user_metadata == METADATA, "user_metadata round trip %r" % run.user_metadata)
    check(run.last_checkpoint is not None and run.last_checkpoint.checkpoint_id == "weights/000002",
          "last_checkpoint %r" % run.last_checkpoint)
    check(run.last_sampler_checkpoint is not None
          and run.last_sampler_checkpoint.checkpoint_id == "sampler_weights/000002",
          "last_sampler_checkpoint %r" % run.last_sampler_checkpoint)
    by_path = rc.get_training_run_by_tinker_path(sp).result()
    check(by_path.training_run_id == run_id, "get_training_run_by_tinker_path %r" % by_path)
    info = rc.get_weights_info_by_tinker_path(sp).result()
    check(info.base_model == BUILTIN_MODEL and info.is_lora and info.lora_rank == 8, "weights info %r" % info)


def check_pagination(svc, rc):
    sdk.new_training_client(svc, rank=4).get_info()  # SDK 0.38 creates the model lazily
    runs = rc.list_training_runs(limit=100).result()
    total = runs.cursor.total_count
    check(total == len(runs.training_runs) and total >= 2, "cursor %r for %d runs" % (runs.cursor, len(runs.training_runs)))
    page = rc.list_training_runs(limit=1, offset=1).result()
    check(len(page.training_runs) == 1 and page.cursor.total_count == total, "page %r" % page)
    check(page.training_runs[0].training_run_id == runs.training_runs[1].training_run_id, "offset 1 is not the 2nd run")


def check_listings(rc, run_id, sp, sampler):
    cks = by_id(rc.list_checkpoints(run_id).result())
    check({"weights/000002", "sampler_weights/000002"} <= set(cks), "checkpoints %r" % list(cks))
    w, s = cks["weights/000002"], cks["sampler_weights/000002"]
    check(w.checkpoint_type == "training" and s.checkpoint_type == "sampler", "types %r" % cks)
    check(w.tinker_path == sp and s.tinker_path == sampler, "tinker_path %r" % cks)
    check(w.expires_at is not None and s.expires_at is None, "expires_at: %r / %r" % (w.expires_at, s.expires_at))
    mine = by_id(rc.list_user_checkpoints().result())
    check({"weights/000002", "sampler_weights/000002"} <= set(mine), "user checkpoints %r" % list(mine))


def check_publish_ttl(rc, run_id, sampler):
    rc.publish_checkpoint_from_tinker_path(sampler).result()
    check(by_id(rc.list_checkpoints(run_id).result())["sampler_weights/000002"].public is True, "not public")
    rc.unpublish_checkpoint_from_tinker_path(sampler).result()
    check(by_id(rc.list_checkpoints(run_id).result())["sampler_weights/000002"].public is False, "still public")
    rc.set_checkpoint_ttl_from_tinker_path(sampler, 3600).result()
    check(by_id(rc.list_checkpoints(run_id).result())["sampler_weights/000002"].expires_at is not None,
          "set TTL did not set expires_at")
    rc.set_checkpoint_ttl_from_tinker_path(sampler, None).result()
    check(by_id(rc.list_checkpoints(run_id).result())["sampler_weights/000002"].expires_at is None,
          "TTL None did not clear expires_at")


def check_expiry_and_delete(rc, tc, run_id):
    short = tc.save_state("short", ttl_seconds=1).result().path
    rolling = tc.save_state("rolling").result().path
    rc.delete_checkpoint_from_tinker_path(rolling).result()
    check("weights/rolling" not in by_id(rc.list_checkpoints(run_id).result()), "deleted checkpoint still listed")
    sdk.expect_api_error(lambda: rc.get_weights_info_by_tinker_path(rolling).result(), sdk.USER_ERRORS,
                         "weights info of a deleted checkpoint")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "weights/short" in by_id(rc.list_checkpoints(run_id).result()):
        time.sleep(0.5)
    check("weights/short" not in by_id(rc.list_checkpoints(run_id).result()), "ttl_seconds=1 still listed after 10 s")
    sdk.expect_api_error(lambda: rc.get_weights_info_by_tinker_path(short).result(), sdk.USER_ERRORS,
                         "weights info of an expired checkpoint")


def check_sessions(svc, rc, run_id, tc):
    sessions = rc.list_sessions(limit=100).result().sessions
    check(sessions, "no sessions listed")
    found = None
    for sid in sessions:
        sess = rc.get_session(sid).result()
        if run_id in sess.training_run_ids:
            found = sess
    check(found is not None, "no session lists run %s" % run_id)
    sc = tc.save_weights_and_get_sampling_client()
    sc.compute_logprobs(sdk.prompt([1, 2, 3])).result()
    sid = next(s for s in sessions if run_id in rc.get_session(s).result().training_run_ids)
    sampler_ids = list(rc.get_session(sid).result().sampler_ids)
    check(sampler_ids, "session %s lists no sampler after save_weights_and_get_sampling_client" % sid)
    s = rc.get_sampler(sampler_ids[-1]).result()
    check(s.base_model == BUILTIN_MODEL, "get_sampler %r" % s)
    return sc


def check_peft(files, rank):
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
        lo, hi = header[k]["data_offsets"]
        nonzero += int(np.any(np.frombuffer(blob[8 + n + lo:8 + n + hi], dtype="<f4") != 0))
    check(nonzero > 0, "every lora_B tensor is zero after training")


def check_archive(rc, path):
    fn = getattr(rc, "get_checkpoint_archive_url_from_tinker_path", None)
    if fn is None:
        return "SDK %s has no archive-URL call" % sdk.SDK_VERSION
    url = fn(path).result().url
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tf:
        files = {os.path.basename(m.name): tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}
    want = {"adapter_config.json", "adapter_model.safetensors"}
    check(want <= set(files), "archive of %s holds %s" % (path, sorted(files)))
    check_peft(files, 8)
    try:
        urllib.request.urlopen(url, timeout=60).read()
        raise AssertionError("the one-time archive URL answered twice")
    except urllib.error.HTTPError as e:
        check(400 <= e.code < 500, "second GET of the archive URL: HTTP %d" % e.code)
    return "%d-byte archive" % len(body)


def run(ctx):
    srv = ctx.start_server()
    svc = sdk.service(srv)
    rc = sdk.rest(svc)
    tc, run_id, sp, sampler = setup(svc, sdk.sft_batch(seed=3))
    ctx.case("training run, by tinker path, weights info, user_metadata", check_training_run, rc, run_id, sp)
    ctx.case("list_training_runs pagination", check_pagination, svc, rc)
    ctx.case("list_checkpoints / list_user_checkpoints (kinds, expires_at)", check_listings, rc, run_id, sp, sampler)
    ctx.case("publish / unpublish / set TTL / clear TTL", check_publish_ttl, rc, run_id, sampler)
    ctx.case("delete; ttl_seconds=1 expires", check_expiry_and_delete, rc, tc, run_id)
    ctx.case("sessions and samplers", check_sessions, svc, rc, run_id, tc)
    archive = ctx.case("archive URL download of the sampler checkpoint (one-time)", check_archive, rc, sampler)
    ctx.case("archive URL download of the training checkpoint", check_archive, rc, sp)
    ctx.finish()
    return "run %s; %s" % (run_id, archive)
