/**
 * A host tool's result the server refuses is answered once more, so the call does not wait for its
 * deadline and end `timeout` (ambiguous): an error too large (a tool that throws a 5 MiB message,
 * past BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES' 4 MiB) is posted again cut down to its code and the
 * start of its message, saying it was cut. Against a real server process. And the host driver's
 * documentation names every error code the SDK's host posts.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Schema } from "effect"
import { describe, expect, it } from "@effect/vitest"
import { Brain, type Event, isOutcomeUnrecorded, tool, ToolResultUnrecorded } from "../../src/sdk/index.js"
import { ROOT, sharedServer } from "../support/server.js"
import { MAX_JSON_DEPTH } from "../../src/domain/Limits.js"
import { history, HostFetch } from "./support.js"

const kindOf = (events: ReadonlyArray<Event>, kind: string) => events.filter((e) => e.kind === kind)

describe("host tool results the server refuses", () => {
  const server = sharedServer()

  it("an error result too large for the server is answered once more, bounded, keeping its code and saying it was cut, so the call ends at once instead of timing out", async () => {
    const recording = new HostFetch()
    const client = new Brain({ baseUrl: server().baseUrl, fetch: recording.fetch })
    const huge = `${"the disk is full; ".repeat(8)}${"x".repeat(5 * 1024 * 1024)}`
    let runs = 0
    const boom = tool({
      name: "boom",
      input: Schema.Struct({}),
      // Far past the test's timeout: a call left waiting for its deadline would not end here.
      timeoutMs: 600_000,
      run: () => {
        runs++
        throw new Error(huge)
      }
    })
    try {
      const session = await client.sessions.create({
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "boom", input: {} }] }, { text: "done" }] },
        tools: [boom]
      })
      expect((await session.send("go")).turn.status).toBe("ended")
      expect(runs).toBe(1)

      const events = await history(client, session.id)
      const [call] = kindOf(events, "tool_call_started")
      expect(kindOf(events, "tool_call_failed")).toHaveLength(0)
      const ended = kindOf(events, "tool_call_ended")
      expect(ended).toHaveLength(1)
      const data = ended[0]!.data as { outcome: string; is_error: boolean; output: { code: string; message: string } }
      expect(data).toMatchObject({ outcome: "error", is_error: true, output: { code: "tool_error" } })
      expect(data.output.message.startsWith("the disk is full; ")).toBe(true)
      expect(data.output.message).toContain("[cut: the first 4096 of")
      expect(data.output.message).toContain("payload_too_large")
      expect(data.output.message.length).toBeLessThan(8 * 1024)

      // The refused error, then its bounded stand-in: posted once, not again.
      const posted = recording.resultsFor(session.id, call!.sequence) as Array<{ error: { code: string; message: string } }>
      expect(posted.map((p) => p.error.message.length > 5 * 1024 * 1024)).toEqual([true, false])
      expect(posted[1]!.error).toEqual(data.output)
    } finally {
      await client.close()
    }
  })
})

describe("a host tool's output nested past MAX_JSON_DEPTH", () => {
  const server = sharedServer()

  it("a host result nested past the depth bound, 100 to 100,000 levels, fails that call with a typed invalid_output naming the bound, at once, and the server keeps serving", async () => {
    const client = new Brain({ baseUrl: server().baseUrl })
    try {
      for (const levels of [100, 10_000, 100_000]) {
        const deep = tool({
          name: "deep",
          input: Schema.Struct({}),
          // Far past the test's timeout: a call left waiting for its deadline would not end here.
          timeoutMs: 600_000,
          run: () => {
            let v: unknown = 1
            for (let i = 0; i < levels; i++) v = [v]
            return v
          }
        })
        const session = await client.sessions.create({
          model: { provider: "scripted", replies: [{ tool_calls: [{ name: "deep", input: {} }] }, { text: "done" }] },
          tools: [deep]
        })
        expect((await session.send("go")).turn.status).toBe("ended")
        const events = await history(client, session.id)
        const ended = kindOf(events, "tool_call_ended")
        expect(ended, `${levels}`).toHaveLength(1)
        expect(ended[0]!.data).toMatchObject({ outcome: "error", is_error: true, output: { code: "invalid_output", message: expect.stringContaining(`deeper than ${MAX_JSON_DEPTH} levels`) } })
        expect(JSON.stringify(ended[0]!.data)).not.toMatch(/call stack/i)
      }
      expect((await fetch(`${server().baseUrl}/health/live`)).status).toBe(204)
    } finally {
      await client.close()
    }
  })
})

describe("a host tool's result taken but not recorded", () => {
  const server = sharedServer()

  it("a result refused outcome_unrecorded (500 journal_write_failed) is not posted again, and the tool's onUnrecorded is told with a typed ToolResultUnrecorded", async () => {
    // The result reaches the real server, which takes it; its answer is then replaced by the
    // refusal the server gives when the outcome's commit fails (a journal failure cannot be made
    // to happen on demand in a server process).
    const recording = new HostFetch()
    const refusal = {
      code: "journal_write_failed",
      message: "the answer to the call was taken, but its outcome could not be recorded",
      retryable: false,
      details: { reason: "outcome_unrecorded", ambiguous: true }
    }
    const fetch: typeof recording.fetch = async (url, init) => {
      const answer = await recording.fetch(url, init)
      if (!(init?.method === "POST" && url.endsWith("/results"))) return answer
      await answer.arrayBuffer()
      return new Response(JSON.stringify(refusal), { status: 500, headers: { "content-type": "application/json" } })
    }
    const client = new Brain({ baseUrl: server().baseUrl, fetch })
    const told: Array<ToolResultUnrecorded> = []
    const lookup = tool({
      name: "lookup",
      input: Schema.Struct({}),
      run: () => ({ answer: 42 }),
      onUnrecorded: (e) => void told.push(e)
    })
    try {
      const session = await client.sessions.create({
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "lookup", input: {} }] }, { text: "done" }] },
        tools: [lookup]
      })
      await session.send("go")
      const [call] = kindOf(await history(client, session.id), "tool_call_started")
      expect(told).toHaveLength(1)
      const [error] = told
      expect(error).toBeInstanceOf(ToolResultUnrecorded)
      expect(error!._tag).toBe("ToolResultUnrecorded")
      expect(error!.reason).toBe("outcome_unrecorded")
      expect({ sessionId: error!.sessionId, sequence: error!.sequence }).toEqual({ sessionId: session.id, sequence: call!.sequence })
      expect(isOutcomeUnrecorded(error!.refusal)).toBe(true)
      expect(error!.refusal).toMatchObject({ code: "journal_write_failed", status: 500, details: { reason: "outcome_unrecorded" } })
      // Posted once: no stand-in, no repeat.
      expect(recording.resultsFor(session.id, call!.sequence)).toEqual([{ session_id: session.id, sequence: call!.sequence, ok: { answer: 42 } }])
    } finally {
      await client.close()
    }
  })
})

describe("the host driver's documentation", () => {
  it("docs/environments.md names every error code the SDK's host posts", () => {
    const source = fs.readFileSync(path.join(ROOT, "src/sdk/HostCalls.ts"), "utf8")
    const posted = [...new Set([...source.matchAll(/error: \{ code: "([a-z_]+)"/g)].map((m) => m[1]!))].sort()
    expect(posted).toEqual(["invalid_input", "invalid_output", "tool_error", "unknown_tool"])
    const doc = fs.readFileSync(path.join(ROOT, "docs/environments.md"), "utf8")
    const driver = doc.slice(doc.indexOf("## The `host` driver"), doc.indexOf("### Registering"))
    const named = driver.slice(0, driver.indexOf("but any language"))
    for (const code of posted) expect(named, code).toContain(`\`${code}\``)
  })
})
