"""Placeholder replaced below."""
def compare_all(work, scenario, *, model_run_id, real_run_ids):
    return {}
