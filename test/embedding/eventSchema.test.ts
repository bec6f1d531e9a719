/**
 * `brain/effect`'s `Event` is both the public Event's schema and its type, and the two agree: what
 * the schema decodes is an Event as the type says (an absent `origin` is absent, never a key
 * holding undefined), for an application compiled with exactOptionalPropertyTypes too
 * (test/fixtures/effect-app/event.ts, type-checked against the package's declarations).
 */
import { execFile, execSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { promisify } from "node:util"
import { Either, Schema } from "effect"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Event } from "../../src/effect.js"
import { ROOT } from "../support/server.js"

const run = promisify(execFile)
const TSC = path.join(ROOT, "node_modules/typescript/bin/tsc")

const base = {
  session_id: "ses_01hzzzzzzzzzzzzzzzzzzzzzzz",
  sequence: 7,
  recorded_at_ms: 1_700_000_000_000,
  kind: "note",
  data: { text: "hi" }
}

describe("the Event schema and the Event type agree", () => {
  beforeAll(() => {
    if (!fs.existsSync(path.join(ROOT, "dist/effect.d.ts"))) execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
  }, 180_000)

  it("what the schema decodes is an Event, and an Event is what it encodes, for an application compiled with exactOptionalPropertyTypes", async () => {
    const project = path.join(ROOT, "test/fixtures/effect-app/tsconfig.exact.json")
    const { code, out } = await run(process.execPath, [TSC, "-p", project], { cwd: ROOT }).then(
      ({ stdout }) => ({ code: 0, out: stdout }),
      (e: { code: number; stdout: string }) => ({ code: e.code, out: e.stdout })
    )
    expect(out).toBe("")
    expect(code).toBe(0)
    // A whole type check of Effect's types: about 15 s on a quiet 2-core machine.
  }, 300_000)

  it("an Event with an origin decodes to itself; one without has no origin key; an origin given as undefined is refused, as the type has no room for it", () => {
    const withOrigin = { ...base, origin: { kind: "tool", sequence: 5 } }
    expect(Schema.decodeUnknownSync(Event)(withOrigin)).toEqual(withOrigin)
    const without = Schema.decodeUnknownSync(Event)(base)
    expect(without).toEqual(base)
    expect("origin" in without).toBe(false)
    expect(Either.isLeft(Schema.decodeUnknownEither(Event)({ ...base, origin: undefined }))).toBe(true)
    // A misshapen origin is refused as before.
    expect(Either.isLeft(Schema.decodeUnknownEither(Event)({ ...base, origin: { kind: "human", sequence: 5 } }))).toBe(true)
  })
})
