import * as fs from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { Catalogue, emitRefusal, RecordKinds, ReservedKinds } from "../../src/domain/Records.js"
import { FailureCodes } from "../../src/domain/Failure.js"

describe("Record catalogue", () => {
  it("docs/journal.md lists exactly the catalogue's kinds, groups and visibility", () => {
    const doc = fs.readFileSync(new URL("../../docs/journal.md", import.meta.url), "utf8")
    const section = doc.slice(doc.indexOf("## Record kinds"))
    const rows = [...section.matchAll(/^\| `([a-z_]+)` \| ([a-z]+) \| ([a-z]+)/gm)].map((m) => [m[1], m[2], m[3]])
    expect(rows).toEqual(RecordKinds.map((k) => [k, Catalogue[k].group, Catalogue[k].visibility]))
  })

  it("every system kind and transcript_replaced are reserved against extensions", () => {
    for (const k of RecordKinds) expect(ReservedKinds.has(k)).toBe(true)
    expect(ReservedKinds.has("transcript_replaced")).toBe(true)
    expect(ReservedKinds.has("progress")).toBe(false)
  })

  it("every public failure code is reserved against extensions: no Event can pass for a system outcome", () => {
    for (const code of FailureCodes) expect(ReservedKinds.has(code), code).toBe(true)
  })

  it("an extension may emit any non-empty kind that is not reserved and holds no line break: a CR or LF would end its SSE frame's event: line", () => {
    for (const kind of ["progress", "two words", "a:b", "ns.kind/v1", "é ✓ 🙂", "tab\there", " padded ", "method_not_allowed_x"]) {
      expect(emitRefusal(kind), JSON.stringify(kind)).toBeUndefined()
    }
    for (const kind of ["", "a\nb", "a\rb", "a\r\nb", "\n", "trailing\n", ...ReservedKinds]) {
      expect(emitRefusal(kind), JSON.stringify(kind)).toEqual(expect.any(String))
    }
    for (const notAKind of [undefined, null, 7, {}]) expect(emitRefusal(notAKind)).toEqual(expect.any(String))
  })

  it("failure codes are a closed set without duplicates", () => {
    expect(new Set(FailureCodes).size).toBe(FailureCodes.length)
  })
})
