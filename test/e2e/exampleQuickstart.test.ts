/**
 * The README's SDK quick start, as the README runs it: `node examples/quickstart.mjs <baseUrl>` as
 * its own process against the product server (`brain serve`), importing the built SDK through the
 * package's `brain/sdk` export. Its host tool is called once, its progress Event is committed
 * before `tool_call_ended` with the call's origin, and the Events it streams end with the turn.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { promisify } from "node:util"
import { afterAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, ROOT, type ServerProcess, startServer } from "../support/server.js"

const run = promisify(execFile)

describe("the README's SDK quick start", () => {
  let server: ServerProcess | undefined
  afterAll(async () => {
    await server?.dispose()
  })

  it("the README runs examples/quickstart.mjs, and it runs a session with a host tool against a real server, streaming its Events in order", async () => {
    const readme = fs.readFileSync(path.join(ROOT, "README.md"), "utf8")
    expect(readme.slice(readme.indexOf("## From TypeScript"))).toContain("node examples/quickstart.mjs")
    ensureBuilt()
    server = await startServer({ entry: "product" })
    const { stdout } = await run(process.execPath, [path.join(ROOT, "examples/quickstart.mjs"), server.baseUrl], { cwd: ROOT })
    const lines = stdout.trim().split("\n")
    const events = lines.filter((l) => l.startsWith("event ")).map((l) => {
      const [, sequence, kind, ...rest] = l.split(" ")
      const text = rest.join(" ")
      const at = text.lastIndexOf(" origin=")
      return {
        sequence: Number(sequence),
        kind: kind!,
        data: JSON.parse(at >= 0 ? text.slice(0, at) : text),
        origin: at >= 0 ? JSON.parse(text.slice(at + 8)) : undefined
      }
    })
    const sequences = events.map((e) => e.sequence)
    expect(sequences).toEqual([...new Set(sequences)].sort((a, b) => a - b))
    const started = events.filter((e) => e.kind === "tool_call_started")
    const ended = events.filter((e) => e.kind === "tool_call_ended")
    const progress = events.filter((e) => e.kind === "progress")
    expect(started).toHaveLength(1)
    expect(ended.map((e) => e.data)).toEqual([expect.objectContaining({ outcome: "ok", output: { words: 3 } })])
    expect(progress).toEqual([expect.objectContaining({ origin: { kind: "tool", sequence: started[0]!.sequence } })])
    expect(progress[0]!.sequence).toBeLessThan(ended[0]!.sequence)
    expect(events.at(-1)!.kind).toBe("turn_ended")
    expect(lines.at(-1)).toBe(`answer ${JSON.stringify({ text: "That is three words." })}`)
  }, 60_000)
})
