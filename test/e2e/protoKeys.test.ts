/**
 * User data is kept as sent, key for key: a transcript content part's `__proto__` key (JSON.parse
 * makes it an own property like any other) reaches the journal and reads back with the part's
 * other keys, as `__proto__` in a tool call's `input` does. A decoder's copy made by assignment
 * would set the copy's prototype instead and lose the key without a word. Checked on a real
 * server process, across a restart (what the journal holds).
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer } from "../support/server.js"

describe("a `__proto__` key in user JSON is kept, never dropped", () => {
  const server = sharedServer()

  it("a transcript part's `__proto__` key is journaled and read back with the part's other keys, as a tool call input's is", async () => {
    const body =
      '{"model":{"provider":"scripted"},"transcript":[{"role":"user","content":[{"type":"text","text":"a","foo":1,"__proto__":{"y":1},"constructor":2}]},' +
      '{"role":"assistant","content":"","tool_calls":[{"id":"1","name":"t","input":{"__proto__":{"z":1},"k":2}}]}]}'
    const created = await request(server().baseUrl, "/v1/sessions", { raw: body, headers: { "content-type": "application/json" } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const expected = '[{"role":"user","content":[{"type":"text","text":"a","foo":1,"__proto__":{"y":1},"constructor":2}]},' +
      '{"role":"assistant","content":"","tool_calls":[{"id":"1","name":"t","input":{"__proto__":{"z":1},"k":2}}]}]'
    const read = async () => {
      const r = await request(server().baseUrl, `/v1/sessions/${id}/transcript`)
      expect(r.status, r.text).toBe(200)
      return r.text
    }
    expect(await read()).toContain(`"messages":${expected}`)
    await server().restart()
    expect(await read()).toContain(`"messages":${expected}`)
  })
})
