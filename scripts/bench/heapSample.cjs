// Preloaded into the server by scripts/bench/alloc.js: V8's sampling heap profiler on the main
// thread, objects already collected included (a turn's garbage is what this measures). SIGTTIN
// starts it, SIGTTOU stops it and writes the profile to BRAIN_BENCH_HEAP_SAMPLE.
const inspector = require("node:inspector")
const fs = require("node:fs")
const session = new inspector.Session()
session.connect()
process.on("SIGTTIN", () => {
  session.post("HeapProfiler.startSampling", {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true
  })
})
process.on("SIGTTOU", () => {
  session.post("HeapProfiler.stopSampling", (err, r) => {
    fs.writeFileSync(process.env.BRAIN_BENCH_HEAP_SAMPLE, err ? JSON.stringify({ error: String(err) }) : JSON.stringify(r.profile))
  })
})
