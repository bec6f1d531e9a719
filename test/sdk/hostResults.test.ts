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
import { Brain, type Event, tool } from "../../src/sdk/index.js"
import { ROOT, sharedServer } from "../support/server.js"
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
      timeoutMs: 20_000,
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
      const started = Date.now()
      expect((await session.send("go")).turn.status).toBe("ended")
      expect(Date.now() - started, "well before the call's 20 s deadline").toBeLessThan(10_000)
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

describe("the host driver's documentation", () => {
  it("docs/environments.md names every error code the SDK's host posts", () => {
    const source = fs.readFileSync(path.join(ROOT, "src/sdk/Host.ts"), "utf8")
    const posted = [...new Set([...source.matchAll(/error: \{ code: "([a-z_]+)"/g)].map((m) => m[1]!))].sort()
    expect(posted).toEqual(["invalid_input", "invalid_output", "tool_error", "unknown_tool"])
    const doc = fs.readFileSync(path.join(ROOT, "docs/environments.md"), "utf8")
    const driver = doc.slice(doc.indexOf("## The `host` driver"), doc.indexOf("### Registering"))
    const named = driver.slice(0, driver.indexOf("but any language"))
    for (const code of posted) expect(named, code).toContain(`\`${code}\``)
  })
})
