/**
 * A graceful stop of an idle server: nothing to drain, so it exits 0 soon after SIGTERM (DESIGN:
 * within about a second of the drain ending). What is asserted is what the stop did, not how long
 * it took: the kept-alive connection of the readiness probe was closed by the drain, not waited
 * out (a stop waits DRAIN_ANSWERS_MS for a connection still open and then says it abandoned it),
 * and the process exits 0 once its program ends (src/cli/main.ts leaves no timer to hold it: it
 * calls `process.exit`). Against the real command (`brain serve`) on a fresh data directory.
 */
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, logMessages, type ServerProcess, startServer } from "../support/server.js"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
afterEach(async () => {
  await server?.dispose()
  server = undefined
})

describe("an idle server's graceful stop", () => {
  it("exits 0 after SIGTERM, its readiness probed with fetch, whose kept-alive connection the drain closes rather than waits out", async () => {
    server = await startServer({ entry: "product" })
    for (;;) {
      const ready = await fetch(server.url("/health/ready"))
      await ready.arrayBuffer()
      if (ready.ok) break
      await new Promise((r) => setTimeout(r, 20))
    }
    const exited = await server.stop()
    expect(exited, server.output).toEqual({ code: 0, signal: null })
    expect(logMessages(server).filter((m) => m.startsWith("drained")), server.output).toEqual(["drained; closing"])
  }, 60_000)
})
