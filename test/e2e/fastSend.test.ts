/**
 * Sends are answered by the gate's own route (src/http/FastSend.ts) when they arrive in their plain
 * form, and by HttpApi's router when they do not (here: the session id percent-encoded, which the
 * router decodes to the same id and the gate's route leaves alone). Both must answer alike: the
 * same statuses, headers that matter and bodies, for every kind of answer a send can get.
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer } from "../support/server.js"

/** The session id with its first character percent-encoded: the same id to HttpApi's router. */
const escaped = (id: string) => `%${id.charCodeAt(0).toString(16)}${id.slice(1)}`

describe("the gate's route for sends", () => {
  const server = sharedServer()

  const create = async () => (await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id as string
  /** The same request to a fresh session along each path; the answers with the session's id blanked. */
  const both = async (path: (id: string) => string, options: Parameters<typeof request>[2] & { readonly before?: (at: string) => Promise<void> }) => {
    const answers = []
    for (const form of [(id: string) => id, escaped]) {
      const id = await create()
      const at = `/v1/sessions/${form(id)}${path(id)}`
      await options.before?.(at)
      const reply = await request(server().baseUrl, at, options)
      answers.push({
        status: reply.status,
        type: reply.headers.get("content-type"),
        applied: reply.headers.get("preference-applied"),
        body: reply.text.split(id).join("<id>")
      })
    }
    expect(answers[0]).toEqual(answers[1])
    return answers[0]!
  }

  it("a plain send and the same send routed by HttpApi get the same answers: the outcome, the receipt, a replay, a conflict, refusals", async () => {
    const sent = await both(() => "/messages", { json: { input: { message: "hi" } } })
    expect(sent.status).toBe(200)
    expect(JSON.parse(sent.body).turn.status).toBe("ended")

    const submitted = await both(() => "/messages", { json: { input: { message: "later" } }, headers: { prefer: "respond-async" } })
    expect(submitted).toMatchObject({ status: 202, applied: "respond-async" })

    const key = { "idempotency-key": "k-1" }
    const replayed = await both(() => "/messages", {
      json: { input: { message: "once" } },
      headers: key,
      before: async (at) => void (await request(server().baseUrl, at, { json: { input: { message: "once" } }, headers: key }))
    })
    expect(replayed.status).toBe(200)

    const conflict = await both(() => "/messages", {
      json: { input: { message: "other" } },
      headers: key,
      before: async (at) => void (await request(server().baseUrl, at, { json: { input: { message: "once" } }, headers: key }))
    })
    expect(conflict.status).toBe(409)

    const ended = await both(() => "/messages", {
      json: { input: { message: "too late" } },
      before: async (at) => void (await request(server().baseUrl, at.replace(/\/messages$/, "/end"), { method: "POST" }))
    })
    expect(ended.status).toBe(409)
    expect(JSON.parse(ended.body).code).toBe("session_ended")

    // Not decoded by the route's schemas: left to HttpApi on both paths, answered alike.
    const unknownField = await both(() => "/messages", { json: { input: { message: "x" }, extra: 1 } })
    expect(unknownField.status).toBe(400)
    const badKey = await both(() => "/messages", { json: { input: { message: "x" } }, headers: { "idempotency-key": "k".repeat(300) } })
    expect(badKey.status).toBe(400)
  })

  it("a session that does not exist is 404 on both paths, with the same body", async () => {
    const id = await create()
    await request(server().baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })
    expect((await request(server().baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })).status).toBe(204)
    const plain = await request(server().baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "x" } } })
    const routed = await request(server().baseUrl, `/v1/sessions/${escaped(id)}/messages`, { json: { input: { message: "x" } } })
    expect(plain.status).toBe(404)
    expect({ status: routed.status, text: routed.text }).toEqual({ status: plain.status, text: plain.text })
  })
})
