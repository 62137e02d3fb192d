// Live pages' refresh: tick() now, then again `ms` after each tick settles (never two at once), until the
// returned stop function is called. The server has no push stream for metrics or checkpoints (its only
// Server-Sent Events are the OpenAI streams), so live pages poll, fetching only what is new.
export function poll(tick, ms) {
  let timer = null;
  let stopped = false;
  const run = async () => {
    try {
      await tick();
    } catch (e) { /* the next tick tries again */ }
    if (!stopped) timer = setTimeout(run, ms);
  };
  run();
  return () => { stopped = true; clearTimeout(timer); };
}
