/**
 * A runtime that cannot start says why (docs/embedding.md): every member of `StartupError` carries
 * its reason as its message, so a `ManagedRuntime`'s `runPromise` rejects with an error whose
 * message names the cause, not Effect's "An error has occurred".
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect, ManagedRuntime } from "effect"
import { layer, Sessions } from "../../src/effect.js"
import { AgentloopInUse, AgentloopRejected, AgentloopStoreFailed } from "../../src/services/Agentloop.js"

const dirs: Array<string> = []
const freshDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-startup-messages-"))
  dirs.push(dir)
  return dir
}
afterEach(() => {
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

describe("a startup refusal's message is its reason", () => {
  it("the official loop refused (BRAIN_MAX_WASM_MEMORY_BYTES below what it asks for): runPromise rejects with a message naming the bound", async () => {
    const runtime = ManagedRuntime.make(layer({ dataDir: freshDir(), maxWasmMemoryBytes: 65536 }))
    try {
      const rejected = await runtime.runPromise(Effect.asVoid(Sessions)).then(() => undefined, (e: unknown) => e as Error)
      expect(rejected, "the runtime started").toBeDefined()
      expect(rejected!.message).toContain("BRAIN_MAX_WASM_MEMORY_BYTES")
      expect(rejected!.message).not.toContain("An error has occurred")
    } finally {
      await runtime.dispose()
    }
  })

  it("the Agentloops errors carry their reason as their message", () => {
    expect(new AgentloopRejected({ reason: "not WebAssembly" }).message).toBe("not WebAssembly")
    expect(new AgentloopInUse({ reason: "a session uses it" }).message).toBe("a session uses it")
    expect(new AgentloopStoreFailed({ reason: "disk full" }).message).toBe("disk full")
  })
})
