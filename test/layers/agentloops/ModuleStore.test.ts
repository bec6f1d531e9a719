/**
 * The module store's leftovers (src/layers/agentloops/ModuleStore.ts): a twin written after its
 * module was removed (the removal raced the twin's write), a twin whose module is gone, and the
 * temporary files of writes a crash cut short are swept when the Agentloops service starts; what
 * belongs to a stored module stays.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as AgentloopsModules from "../../../src/layers/AgentloopsModules.js"
import { fileStore } from "../../../src/layers/agentloops/ModuleStore.js"
import { overdueMarkerName, prebuiltTwinName, TWIN_FORMAT } from "../../../src/layers/wasm/TwinExports.js"
import { Agentloops } from "../../../src/services/Agentloop.js"

const STORED = "a".repeat(64)
const GONE = "b".repeat(64)

describe("the module store's leftovers", () => {
  it.effect("starting the Agentloops service removes twins without their module, twins of another twin format, and temporary files, and keeps every stored module and its twin", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-modules-"))
      const store = fileStore(dir)
      yield* store.write(STORED, new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]))
      const twins = path.join(dir, "twins")
      fs.mkdirSync(twins, { recursive: true })
      const keptTwin = path.join(twins, prebuiltTwinName(STORED))
      const orphanTwin = path.join(twins, prebuiltTwinName(GONE))
      const twinTmp = path.join(twins, `${prebuiltTwinName(STORED)}.123.abc.tmp`)
      const olderTwin = path.join(twins, `${STORED}.v${TWIN_FORMAT - 1}.wasm`)
      const moduleTmp = path.join(dir, `${GONE}.wasm.123.456.tmp`)
      for (const f of [keptTwin, orphanTwin, twinTmp, olderTwin, moduleTmp]) fs.writeFileSync(f, "x")

      yield* Effect.scoped(Effect.flatMap(Agentloops, () => Effect.void).pipe(Effect.provide(AgentloopsModules.layer({ store }))))

      expect(fs.existsSync(path.join(dir, `${STORED}.wasm`))).toBe(true)
      expect(fs.existsSync(keptTwin)).toBe(true)
      expect(fs.existsSync(orphanTwin)).toBe(false)
      expect(fs.existsSync(twinTmp)).toBe(false)
      expect(fs.existsSync(olderTwin)).toBe(false)
      expect(fs.existsSync(moduleTmp)).toBe(false)
      expect((yield* store.list).map((m) => m.id)).toEqual([STORED])
    }))

  it.effect("a stored module's mark of a twin past its deadline survives the start's sweep, and goes with its module", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-modules-"))
      const store = fileStore(dir)
      yield* store.write(STORED, new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]))
      const twins = path.join(dir, "twins")
      fs.mkdirSync(twins, { recursive: true })
      const kept = path.join(twins, overdueMarkerName(STORED))
      const orphan = path.join(twins, overdueMarkerName(GONE))
      const older = path.join(twins, `${STORED}.v${TWIN_FORMAT - 1}.overdue`)
      for (const f of [kept, orphan, older]) fs.writeFileSync(f, "")

      yield* Effect.scoped(Effect.flatMap(Agentloops, () => Effect.void).pipe(Effect.provide(AgentloopsModules.layer({ store }))))

      expect(fs.existsSync(kept)).toBe(true)
      expect(fs.existsSync(orphan)).toBe(false)
      expect(fs.existsSync(older)).toBe(false)
      yield* store.remove(STORED)
      expect(fs.existsSync(kept)).toBe(false)
    }))

  it.effect("a data directory without modules or twins starts as before", () =>
    Effect.gen(function*() {
      const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "brain-modules-")), "agentloops")
      yield* Effect.scoped(Effect.flatMap(Agentloops, () => Effect.void).pipe(Effect.provide(AgentloopsModules.layer({ store: fileStore(dir) }))))
      expect(fs.existsSync(dir)).toBe(false)
    }))
})
