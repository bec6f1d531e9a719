/**
 * The shipped modules' instrumented twins are made by the build (scripts/build-guests.js,
 * `dist/loops/twins/<sha256>.v<TWIN_FORMAT>.wasm`) and read by a server instead of being made
 * again with Binaryen after it starts (InlineModules.ts), so the official loop runs on the main
 * thread from a server's first turn. A twin is named by its module's hash and the instrumentation's
 * version, so it is only ever used for the module and the instrumentation it was made from.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { fileURLToPath } from "node:url"
import binaryen from "binaryen"
import { instrument } from "../../../src/layers/wasm/Instrument.js"
import { instrumenterStats, PREBUILT_TWINS, twinOf } from "../../../src/layers/wasm/InlineModules.js"
import { prebuiltTwinName, twinInFile } from "../../../src/layers/wasm/TwinExports.js"
import { echoing, wat } from "../../support/wat.js"

const ROOT = fileURLToPath(new URL("../../..", import.meta.url))
const SHIPPED = ["dist/loops/official.wasm", "dist/loops/examples/echo-tool.wasm", "dist/loops/examples/echo-with-memory.wasm"]
const sha256 = (bytes: Uint8Array) => crypto.createHash("sha256").update(bytes).digest("hex")

describe("prebuilt twins", () => {
  it("every shipped module has a twin made by the build, named by its SHA-256 and the twin format, byte for byte what Instrument.ts makes of it now", () => {
    const dir = fileURLToPath(PREBUILT_TWINS)
    for (const file of SHIPPED) {
      const bytes = new Uint8Array(fs.readFileSync(path.join(ROOT, file)))
      const twin = path.join(dir, prebuiltTwinName(sha256(bytes)))
      expect(fs.existsSync(twin), `${file} has no twin in ${dir}`).toBe(true)
      const kept = twinInFile(fs.readFileSync(twin))
      expect(kept, `${file}'s twin does not match its digest`).toBeDefined()
      expect(sha256(new Uint8Array(kept!)), `${file}'s twin is stale`).toBe(sha256(instrument(bytes)))
    }
    expect(fs.readdirSync(dir).filter((f) => f.endsWith(".wasm")).sort()).toEqual(
      SHIPPED.map((f) => prebuiltTwinName(sha256(new Uint8Array(fs.readFileSync(path.join(ROOT, f)))))).sort()
    )
  })

  it("a module's twin is the same bytes every time it is made, whatever Binaryen's process-wide options were set to before (as asc sets them when the build compiles the loops)", () => {
    const bytes = new Uint8Array(fs.readFileSync(path.join(ROOT, "dist/loops/official.wasm")))
    const first = sha256(instrument(bytes))
    expect(sha256(instrument(bytes))).toBe(first)
    binaryen.setOptimizeLevel(3)
    binaryen.setShrinkLevel(2)
    binaryen.setAlwaysInlineMaxSize(0)
    binaryen.setFlexibleInlineMaxSize(200)
    binaryen.setAllowInliningFunctionsWithLoops(true)
    binaryen.setLowMemoryUnused(true)
    binaryen.setPassArgument("asyncify-imports", "env.other")
    expect(sha256(instrument(bytes))).toBe(first)
  })

  it("the official loop's twin is read and compiled, never sent to the instrumenting thread; a module without one is", async () => {
    const official = new Uint8Array(fs.readFileSync(path.join(ROOT, "dist/loops/official.wasm")))
    const before = instrumenterStats.requests
    const twin = await twinOf(sha256(official), official)
    expect("module" in twin).toBe(true)
    expect(instrumenterStats.requests).toBe(before)

    const other = await wat(echoing())
    const made = await twinOf(sha256(other), other)
    expect("module" in made).toBe(true)
    expect(instrumenterStats.requests).toBe(before + 1)
  })

  it("a twin is used only for the module whose hash names it: another module's bytes under no prebuilt name are instrumented, not given a shipped twin", async () => {
    const official = new Uint8Array(fs.readFileSync(path.join(ROOT, "dist/loops/official.wasm")))
    const changed = new Uint8Array(official)
    // One byte of a custom section's worth appended: another module, another hash.
    const padded = new Uint8Array(changed.length + 3)
    padded.set(changed)
    padded.set([0, 1, 0], changed.length) // an empty custom section named ""
    expect(sha256(padded)).not.toBe(sha256(official))
    const before = instrumenterStats.requests
    const twin = await twinOf(sha256(padded), padded)
    expect("module" in twin).toBe(true)
    expect(instrumenterStats.requests).toBe(before + 1)
  })
})
