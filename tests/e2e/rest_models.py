# Response validation for the REST objects, mirroring the SDK's strict pydantic models (required
# fields, Literal values, ISO 8601 datetimes, the Cursor): a shape the SDK would refuse raises
# ProtocolError here, so every scenario checks it.
import datetime

import wire_codec as wc


def check_datetime(value, what, nullable=False):
    """An ISO 8601 datetime string, as pydantic parses it in the SDK."""
    if value is None and nullable:
        return
    try:
        datetime.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise wc.ProtocolError("%s is not an ISO 8601 datetime: %r" % (what, value))


def _need(obj, fields, what):
    missing = [f for f in fields if f not in obj]
    if missing:
        raise wc.ProtocolError("%s lacks required %s: %r" % (what, missing, obj))


def validate_cursor(cursor, required=False):
    if cursor is None and not required:
        return
    if not isinstance(cursor, dict) or not all(isinstance(cursor.get(k), int)
                                               for k in ("offset", "limit", "total_count")):
        raise wc.ProtocolError("bad cursor %r" % (cursor,))


def validate_checkpoint(c):
    _need(c, ("checkpoint_id", "checkpoint_type", "time", "tinker_path"), "Checkpoint")
    if c["checkpoint_type"] not in ("training", "sampler"):
        raise wc.ProtocolError("checkpoint_type %r" % c["checkpoint_type"])
    check_datetime(c["time"], "Checkpoint.time")
    check_datetime(c.get("expires_at"), "Checkpoint.expires_at", nullable=True)
    return c


def validate_checkpoint_list(obj):
    _need(obj, ("checkpoints",), "CheckpointsListResponse")
    validate_cursor(obj.get("cursor"))
    for c in obj["checkpoints"]:
        validate_checkpoint(c)
    return obj


def validate_training_run(run):
    _need(run, ("training_run_id", "base_model", "model_owner", "is_lora", "last_request_time"), "TrainingRun")
    check_datetime(run["last_request_time"], "TrainingRun.last_request_time")
    for k in ("last_checkpoint", "last_sampler_checkpoint"):
        if run.get(k) is not None:
            validate_checkpoint(run[k])
    return run
