/**
 * A graceful stop of an idle server: nothing to drain, so it exits 0 soon after SIGTERM (DESIGN:
 * within about a second of the drain ending). The bound here is a generous correctness bound, not
 * a benchmark: an exit held by a timer or a connection the stop waits out would pass it only by
 * luck. Against the real command (`brain serve`) on a fresh data directory.
 */
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, type ServerProcess, startServer } from "../support/server.js"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
afterEach(async () => {
  await server?.dispose()
  server = undefined
})

/** Milliseconds: about a second is the design's figure; five leaves room for a loaded machine. */
const IDLE_EXIT_BOUND_MS = 5_000

describe("an idle server's graceful stop", () => {
  it("exits 0 within a few seconds of SIGTERM, its readiness probed with fetch (whose kept-alive connection it closes)", async () => {
    server = await startServer({ entry: "product" })
    for (;;) {
      const ready = await fetch(server.url("/health/ready"))
      await ready.arrayBuffer()
      if (ready.ok) break
      await new Promise((r) => setTimeout(r, 20))
    }
    const started = Date.now()
    const exited = await server.stop()
    const took = Date.now() - started
    expect(exited).toEqual({ code: 0, signal: null })
    expect(took, server.output).toBeLessThan(IDLE_EXIT_BOUND_MS)
  }, 60_000)
})
