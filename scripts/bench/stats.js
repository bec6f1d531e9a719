// Shared by the benchmarks: closed-loop load and percentiles.

/** The p-th percentile (0–100) of an ascending array. */
export const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]

export const ms = (n) => n.toFixed(2)

/** `concurrency` workers run `body(i)` back to back for `durationMs`; rate and latency of the calls. */
export const measure = async (body, concurrency, durationMs) => {
  const latencies = []
  const deadline = performance.now() + durationMs
  const worker = async (i) => {
    while (performance.now() < deadline) {
      const t0 = performance.now()
      await body(i)
      latencies.push(performance.now() - t0)
    }
  }
  const t0 = performance.now()
  await Promise.all(Array.from({ length: concurrency }, (_, i) => worker(i)))
  const elapsed = (performance.now() - t0) / 1000
  latencies.sort((a, b) => a - b)
  return { rate: latencies.length / elapsed, p50: pct(latencies, 50), p99: pct(latencies, 99), n: latencies.length }
}

/** The positive number after `name` on the command line, or `fallback`. */
export const numberFlag = (name, fallback) => {
  const args = process.argv.slice(2)
  const i = args.indexOf(name)
  return i >= 0 && Number(args[i + 1]) > 0 ? Number(args[i + 1]) : fallback
}
