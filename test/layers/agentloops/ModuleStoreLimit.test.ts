/**
 * The module store at the process's open-file limit (a real EMFILE, in a child process whose
 * descriptors are all taken): listing a module's uses or the stored modules, or reading a module, fails
 * rather than answer "none". An empty list of uses would let a
 * module be removed while sessions use it; an empty list of modules, or a module read as missing,
 * would tell a client its uploads are gone. Once descriptors are back, both
 * answer as before. A directory that does not exist still lists nothing.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ensureBuilt, ROOT } from "../../support/server.js"

const ID = "c".repeat(64)

const script = `
import * as fs from "node:fs"
import { Effect } from "effect"
import { fileStore } from ${JSON.stringify(path.join(ROOT, "dist/layers/agentloops/ModuleStore.js"))}
const store = fileStore(process.argv[1])
const run = (e) => Effect.runPromise(Effect.either(e)).then((r) => r._tag === "Right" ? { ok: r.right } : { failed: r.left.reason })
await Effect.runPromise(store.write(${JSON.stringify(ID)}, new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0])))
await Effect.runPromise(store.use(${JSON.stringify(ID)}, "ses_a"))
// Everything loaded before the limit (a module imported then would fail too).
const before = { users: await run(store.users(${JSON.stringify(ID)})), list: await run(store.list), read: await run(Effect.map(store.read(${JSON.stringify(ID)}), (b) => b._tag)), has: await run(store.has(${JSON.stringify(ID)})) }
const held = []
for (;;) {
  try { held.push(fs.openSync("/dev/null", "r")) } catch { break }
}
const atLimit = { users: await run(store.users(${JSON.stringify(ID)})), list: await run(store.list), read: await run(store.read(${JSON.stringify(ID)})), has: await run(store.has(${JSON.stringify(ID)})) }
for (const fd of held) fs.closeSync(fd)
const after = { users: await run(store.users(${JSON.stringify(ID)})), list: await run(store.list), unused: await run(store.users("d".repeat(64))), read: await run(Effect.map(store.read(${JSON.stringify(ID)}), (b) => b._tag)), has: await run(store.has(${JSON.stringify(ID)})), unknown: await run(Effect.map(store.read("d".repeat(64)), (b) => b._tag)), unknownHas: await run(store.has("d".repeat(64))) }
console.log(JSON.stringify({ before, atLimit, after }))
`

describe("the module store at the open-file limit", () => {
  it("a module's uses, the list of modules, a module's bytes fail with EMFILE instead of answering none (whether it is stored is still known), and answer again once descriptors are back; a module never stored is still none", () => {
    ensureBuilt()
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-modules-"))
    try {
      const child = spawnSync("/bin/sh", ["-c", `ulimit -n 1024 && exec "$0" --input-type=module -e "$1" "$2"`, process.execPath, script, dir], {
        cwd: ROOT,
        encoding: "utf8",
        timeout: 30_000
      })
      expect(child.status, child.stderr).toBe(0)
      const { before, atLimit, after } = JSON.parse(child.stdout.trim().split("\n").at(-1)!)
      expect(before.users).toEqual({ ok: ["ses_a"] })
      expect(atLimit.users.failed).toContain("EMFILE")
      expect(atLimit.list.failed).toContain("EMFILE")
      expect(after.users).toEqual({ ok: ["ses_a"] })
      expect(after.list).toEqual({ ok: [{ id: ID, bytes: 8 }] })
      expect(after.unused).toEqual({ ok: [] })
      expect(before.read).toEqual({ ok: "Some" })
      expect(before.has).toEqual({ ok: true })
      expect(atLimit.read.failed).toContain("EMFILE")
      // Whether it is stored takes no descriptor (access(2)): known at the limit too.
      expect(atLimit.has).toEqual({ ok: true })
      expect(after.read).toEqual({ ok: "Some" })
      expect(after.has).toEqual({ ok: true })
      expect(after.unknown).toEqual({ ok: "None" })
      expect(after.unknownHas).toEqual({ ok: false })
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
