/**
 * Uploading a WebAssembly module with the SDK against a real server process: `brain.agentloops`
 * sends the bytes as `POST /v1/agentloops` expects them (`application/wasm`), and a session can
 * name the uploaded loop; a refused module is the server's refusal, sent once.
 */
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { Brain, BrainError } from "../../src/sdk/index.js"
import { serverAndClient } from "./support.js"
import type { ServerProcess } from "../support/server.js"

const official = () => new Uint8Array(fs.readFileSync(new URL("../../dist/loops/official.wasm", import.meta.url)))

describe("brain.agentloops", () => {
  let brain: Brain
  let server: ServerProcess
  serverAndClient((started) => ({ brain, server } = started))

  it("upload sends the module's bytes and answers its id (the SHA-256 of the bytes); list shows it; a session runs it; remove is refused while a session uses it", async () => {
    const bytes = official()
    const uploaded = await brain.agentloops.upload(bytes)
    expect(uploaded).toMatchObject({ id: createHash("sha256").update(bytes).digest("hex"), bytes: bytes.length, loop: true })
    expect((await brain.agentloops.upload(bytes)).id).toBe(uploaded.id)
    expect((await brain.agentloops.list()).map((m) => m.id)).toContain(uploaded.id)
    const session = await brain.sessions.create({ model: { provider: "scripted" }, agentloop: uploaded.id })
    expect((await session.send("first")).turn).toMatchObject({ status: "ended", result: { text: "first" } })
    expect(await brain.agentloops.remove(uploaded.id).catch((e) => e)).toMatchObject({ code: "conflict", status: 409 })
  })

  it("bytes that are not a module are refused invalid_request (400), sent once, nothing stored", async () => {
    let posts = 0
    const client = new Brain({
      baseUrl: server.baseUrl,
      fetch: (url, init) => {
        if (init.method === "POST") posts++
        return fetch(url, init)
      }
    })
    try {
      const before = (await client.agentloops.list()).length
      const refused = await client.agentloops.upload(new TextEncoder().encode("not a module at all, just some text of no use")).catch((e) => e)
      expect(refused).toBeInstanceOf(BrainError)
      expect(refused).toMatchObject({ code: "invalid_request", status: 400, retryable: false })
      expect(posts).toBe(1)
      expect(await client.agentloops.list()).toHaveLength(before)
    } finally {
      await client.close()
    }
  })
})
