/**
 * The short form of `npm run torture` (scripts/torture.js) for CI: 20 kills -9 of a real server
 * while 4 sessions run turns with tools in an http Environment and the example Wasm tool
 * (`--wasm-tools`: two sessions call it alone, each round tried to its end on the main thread; two
 * call it beside the http tool) and a host's tool (`--host-tools`: a host in the script's process,
 * its command stream opened again after every restart; two sessions call it beside the Wasm tool,
 * each round's host call sent with no fiber), the journal's commit log small enough to switch many
 * times between kills; the script checks the journal (over HTTP and in its files), the
 * Environment's log and what the host received, and exits 0 only with no violation.
 */
import { spawn } from "node:child_process"
import { describe, expect, it } from "@effect/vitest"
import { ensureBuilt, ROOT } from "../support/server.js"

const KILLS = 20

/** Runs the script to its exit, without blocking this worker (vitest talks to it meanwhile). */
const run = (args: ReadonlyArray<string>, timeoutMs: number) =>
  new Promise<{ readonly status: number | null; readonly stdout: string; readonly stderr: string }>((resolve) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], timeout: timeoutMs, killSignal: "SIGKILL" })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (d) => (stdout += d))
    child.stderr.on("data", (d) => (stderr += d))
    child.on("close", (status) => resolve({ status, stdout, stderr }))
  })

describe("npm run torture (short form)", () => {
  it(`survives ${KILLS} kills -9 with 4 sessions, http, Wasm and host tools, a commit log that switches often: no acknowledged answer lost, no tool call received twice, every effect closed once, journals dense`, async () => {
    ensureBuilt()
    // A small commit log: it switches many times between kills, and each start writes one again.
    const r = await run(["scripts/torture.js", "--kills", String(KILLS), "--sessions", "4", "--wasm-tools", "--host-tools", "--journal-log-bytes", "16384"], 440_000)
    const summary = /kills (\d+), turns (\d+), acknowledged (\d+), ambiguous (\d+), violations (\d+)/.exec(r.stdout)
    expect(summary, r.stdout + r.stderr).not.toBeNull()
    const [kills, , acknowledged, , violations] = summary!.slice(1).map(Number)
    expect(kills).toBe(KILLS)
    expect(acknowledged).toBeGreaterThan(0)
    expect(violations, r.stdout).toBe(0)
    expect(r.status, r.stdout + r.stderr).toBe(0)
  }, 450_000) // about 80 s alone on 2 cores; a kill waits for an answer first, so more under load
})
