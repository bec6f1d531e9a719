/**
 * The short form of `npm run torture` (scripts/torture.js) for CI: 5 kills -9 of a real server
 * while 4 sessions run turns with tools in an http Environment; the script checks the journal and
 * the Environment's log and exits 0 only with no violation.
 */
import { spawnSync } from "node:child_process"
import { describe, expect, it } from "@effect/vitest"
import { ensureBuilt, ROOT } from "../support/server.js"

describe("npm run torture (short form)", () => {
  it("survives 5 kills with 4 sessions and no violation", () => {
    ensureBuilt()
    const r = spawnSync(process.execPath, ["scripts/torture.js", "--kills", "5", "--sessions", "4"], { cwd: ROOT, encoding: "utf8", timeout: 170_000 })
    expect(r.stdout, r.stdout + r.stderr).toContain("violations 0")
    expect(r.status, r.stdout + r.stderr).toBe(0)
  }, 180_000)
})
