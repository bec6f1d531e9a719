/**
 * docs/abi.md says which error codes a loop's output passes on to its turn ("The entries"): the
 * closed set of failure codes, listed there, so that a guest's author need not look elsewhere.
 */
import * as fs from "node:fs"
import { describe, expect, it } from "vitest"
import { FailureCodes } from "../../src/domain/Failure.js"

describe("docs/abi.md's failure codes", () => {
  it("list every failure code a loop's error output may pass on, and only those", () => {
    const doc = fs.readFileSync(new URL("../../docs/abi.md", import.meta.url), "utf8")
    const list = doc.split("says what each means):")[1]?.split("\n- ")[0] ?? ""
    const listed = [...list.matchAll(/`([a-z_]+)`/g)].map((m) => m[1])
    expect(listed).toEqual([...FailureCodes])
  })
})
