/**
 * Uploaded modules' instrumented twins kept across restarts (InlineModules.ts): made once, written
 * to the cache directory as the twin's SHA-256 then the twin, and read back by a later process
 * instead of being made again with Binaryen; a file that does not match its digest is ignored.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it, vi } from "vitest"
import { cachedTwin, keepTwin } from "../../../src/layers/wasm/InlineModules.js"
import { instrument } from "../../../src/layers/wasm/Instrument.js"
import { overdueMarkerName, prebuiltTwinName } from "../../../src/layers/wasm/TwinExports.js"
import { echoing, returning, wat } from "../../support/wat.js"

const sha256 = (bytes: Uint8Array) => crypto.createHash("sha256").update(bytes).digest("hex")
const tempDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "brain-twins-"))

describe("the twin cache", () => {
  it("a kept twin is read back whole; one with a flipped byte, cut short or missing is not used", async () => {
    const dir = tempDir()
    const module = await wat(echoing())
    const hash = sha256(module)
    expect(await cachedTwin(dir, hash)).toBeUndefined()
    await keepTwin(dir, hash, instrument(module))
    const read = await cachedTwin(dir, hash)
    expect(read !== undefined && "module" in read).toBe(true)

    const file = path.join(dir, prebuiltTwinName(hash))
    const whole = fs.readFileSync(file)
    for (const at of [0, 31, 32, whole.length - 1]) {
      const flipped = Buffer.from(whole)
      flipped[at] = flipped[at]! ^ 0x01
      fs.writeFileSync(file, flipped)
      expect(await cachedTwin(dir, hash), `a flipped byte at ${at}`).toBeUndefined()
    }
    for (const length of [0, 10, 32, whole.length - 1]) {
      fs.writeFileSync(file, whole.subarray(0, length))
      expect(await cachedTwin(dir, hash), `cut to ${length} bytes`).toBeUndefined()
    }
    fs.writeFileSync(file, whole)
    expect(await cachedTwin(dir, hash)).toBeDefined()
  })

  it("a twin made in one process is kept, and a later process reads it instead of sending the module to the instrumenting thread", async () => {
    const dir = tempDir()
    const module = await wat(echoing("brain_run", undefined, { eventsFromEnd: true }))
    const hash = sha256(module)

    vi.resetModules()
    const first = await import("../../../src/layers/wasm/InlineModules.js")
    const made = await first.twinOf(hash, module, dir)
    expect("module" in made).toBe(true)
    expect(first.instrumenterStats.requests).toBe(1)
    const file = path.join(dir, prebuiltTwinName(hash))
    // Written in the background: polled for up to 30 s, a hang guard, not a claim about how soon.
    for (let i = 0; i < 3_000 && !fs.existsSync(file); i++) await new Promise((r) => setTimeout(r, 10))
    expect(fs.existsSync(file)).toBe(true)

    vi.resetModules()
    const later = await import("../../../src/layers/wasm/InlineModules.js")
    const read = await later.twinOf(hash, module, dir)
    expect("module" in read).toBe(true)
    expect(later.instrumenterStats.requests).toBe(0)
  })

  it("a module whose twin takes the instrumenting thread past its deadline gets none, a new thread makes the next module's, and a later process never hands the module to the thread again", async () => {
    const dir = tempDir()
    const slow = await wat(returning('{"ok":"slow"}'))
    const next = await wat(returning('{"ok":"next"}'))

    vi.resetModules()
    const first = await import("../../../src/layers/wasm/InlineModules.js")
    // No thread starts and loads Binaryen within a millisecond: the slow module is overdue.
    first.instrumentingDeadline.ms = 1
    const none = await first.twinOf(sha256(slow), slow, dir)
    expect("failure" in none && none.failure).toMatch(/past its deadline/)
    first.instrumentingDeadline.ms = 120_000
    // Remembered in the process: asked again, it is not handed over again.
    const requests = first.instrumenterStats.requests
    expect("failure" in await first.twinOf(sha256(slow), slow, dir)).toBe(true)
    expect(first.instrumenterStats.requests).toBe(requests)
    const made = await first.twinOf(sha256(next), next, dir)
    expect("module" in made).toBe(true)
    const mark = path.join(dir, overdueMarkerName(sha256(slow)))
    // Written in the background: polled for up to 30 s, a hang guard, not a claim about how soon.
    for (let i = 0; i < 3_000 && !fs.existsSync(mark); i++) await new Promise((r) => setTimeout(r, 10))
    expect(fs.existsSync(mark)).toBe(true)

    vi.resetModules()
    const later = await import("../../../src/layers/wasm/InlineModules.js")
    const again = await later.twinOf(sha256(slow), slow, dir)
    expect("failure" in again && again.failure).toMatch(/past its deadline/)
    expect(later.instrumenterStats.requests).toBe(0)
  })
})
