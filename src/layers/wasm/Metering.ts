/**
 * What each metering site of a twin charges (Instrument.ts, "Metering"): the code it guards.
 *
 * Binaryen's `log-execution` pass calls an imported `log_execution(i32)` at every function entry,
 * loop header, `return` and function end, each with a number of its own. Here every function's
 * code is walked once and those calls become charges:
 *
 * - at a **function entry**, the function's instructions outside its loops;
 * - at a **loop header**, the loop body's instructions outside the loops nested in it;
 * - at a `return` or a function's end, nothing (the call is removed): what ran before it was
 *   charged at the entry or loop header it followed.
 *
 * Each charge is ceil(instructions / INSTRUCTIONS_PER_UNIT) units, at least one. That is an upper
 * bound of what the guest runs between two charges: within one entry of a function, or one
 * iteration of a loop, each of its instructions outside nested loops runs at most once, since only
 * a branch to a `loop` goes backwards, and that branch is the next iteration, charged again; a
 * forward branch only skips code already charged; a call is one instruction here, its callee
 * charged at its own entry; a nested loop charges its own iterations. So however long a straight
 * run of code, the main thread reads its clock (Inline.ts, `brain.tick`) after at most one
 * allowance of fuel's worth of instructions, or one site's, whichever is more (a charge past the
 * fuel left ticks before its code runs).
 *
 * An instruction is one node of Binaryen's IR (a block, a `local.get` and a constant alike), counted
 * in the guest's code as read, before anything is added: Asyncify's and the written count's code
 * comes on top, a constant factor the unit absorbs.
 *
 * The calls are found by walking each function's IR, the walker knowing each kind of expression's
 * children; a kind it does not know (GC, strings, stack switching: nothing Brain's guests use) makes
 * the module's instrumentation fail, and the module runs on worker threads. The pass numbers its
 * calls from a counter the process keeps: the numbers it gives the module are read from a module of
 * one empty function run through it just before and just after, and every one of them must have
 * been found and rewritten, else the instrumentation fails the same way. A site left with its
 * number would charge an arbitrary amount, zero among them.
 */
import binaryen from "binaryen"

/** Binaryen's accessors of each kind of expression (`X.Block!.getChildAt`, …), which its typings do not declare. */
const X = binaryen as unknown as Record<string, Record<string, (e: number, ...args: Array<any>) => any>>

/**
 * Instructions per unit of fuel. Chosen so that the official loop spends what it did when every
 * site was one unit: a turn with one tool call, about 5,300 units both ways (at 16 a unit, 15,300;
 * at 32, 8,400), under one allowance, so it reads the clock no more often. No site charges less
 * than before (one unit at least), and one allowance (Inline.ts, FUEL: 20,000 units) is at most
 * 1,280,000 instructions of straight-line code: about a millisecond.
 */
export const INSTRUCTIONS_PER_UNIT = 64

/** The number the next call site `log-execution` adds in this process will have. */
export const nextSiteNumber = (): number => {
  const probe = new binaryen.Module()
  try {
    probe.addFunction("f", binaryen.none, binaryen.none, [], probe.nop())
    probe.runPasses(["log-execution"])
    // Its body: (block (call $log_execution (i32.const n)) (nop)).
    const call = X.Block!.getChildAt!(binaryen.getFunctionInfo(probe.getFunction("f")).body, 0)
    return X.Const!.getValueI32!(X.Call!.getOperandAt!(call, 0)) + 1
  } finally {
    probe.dispose()
  }
}

/** A function's or a loop body's code: its instructions outside nested loops, and whether its head site was found (it is child 0 of `head`). */
interface Scope {
  readonly head: binaryen.ExpressionRef
  instructions: number
  found: boolean
}

/**
 * Replaces every call of `logName` (the sites `log-execution` numbered `first` to `first + sites - 1`)
 * with `charge` of the code it guards, or removes it (above). Throws when a site is not where the
 * pass puts one, or some site was not found.
 */
export const chargeSites = (
  m: binaryen.Module,
  logName: string,
  first: number,
  sites: number,
  charge: (units: number) => binaryen.ExpressionRef
): void => {
  const found = new Uint8Array(sites)
  const siteNumber = (call: binaryen.ExpressionRef): void => {
    const operand = X.Call!.getOperandAt!(call, 0)
    const n = binaryen.getExpressionId(operand) === binaryen.ConstId ? X.Const!.getValueI32!(operand) - first : -1
    if (n < 0 || n >= sites || found[n] === 1) throw new Error("a metering site the instrumentation did not expect")
    found[n] = 1
  }
  const isSite = (e: binaryen.ExpressionRef) => binaryen.getExpressionId(e) === binaryen.CallId && X.Call!.getTarget!(e) === logName
  for (let i = 0; i < m.getNumFunctions(); i++) {
    const info = binaryen.getFunctionInfo(m.getFunctionByIndex(i))
    if (info.module || info.body === 0) continue
    const scopes: Array<Scope> = [{ head: info.body, instructions: 0, found: false }]
    // Expressions to visit, each with its scope's index (an explicit stack: a body may nest deeply).
    const stack: Array<number> = [info.body, 0]
    while (stack.length > 0) {
      const scope = stack.pop()!
      const e = stack.pop()!
      const s = scopes[scope]!
      s.instructions++
      const id = binaryen.getExpressionId(e)
      if (id === binaryen.BlockId) {
        const n = X.Block!.getNumChildren!(e)
        for (let j = n - 1; j >= 0; j--) {
          const child = X.Block!.getChildAt!(e, j)
          if (!isSite(child)) {
            stack.push(child, scope)
            continue
          }
          siteNumber(child)
          if (j === 0 && e === s.head && !s.found) s.found = true
          else X.Block!.setChildAt!(e, j, m.nop())
        }
      } else if (id === binaryen.LoopId) {
        const body = X.Loop!.getBody!(e)
        scopes.push({ head: body, instructions: 0, found: false })
        stack.push(body, scopes.length - 1)
      } else if (isSite(e)) {
        throw new Error("a metering site the instrumentation did not expect")
      } else {
        for (const child of children(e, id)) if (child !== 0) stack.push(child, scope)
      }
    }
    // Each head site made its charge once its code is counted (the walk went on past it).
    for (const s of scopes) {
      if (!s.found) throw new Error("a function or loop without its metering site")
      X.Block!.setChildAt!(s.head, 0, charge(Math.max(1, Math.ceil(s.instructions / INSTRUCTIONS_PER_UNIT))))
    }
  }
  if (found.includes(0)) throw new Error("a metering site the instrumentation did not find")
}

const operands = (kind: Record<string, (e: number, ...args: Array<any>) => any>, e: number): Array<number> =>
  Array.from({ length: kind.getNumOperands!(e) as number }, (_, i) => kind.getOperandAt!(e, i) as number)

/** The children of every kind of expression but blocks and loops (walked above); throws for a kind this does not know. */
const CHILDREN: ReadonlyMap<number, (e: number) => ReadonlyArray<number>> = new Map<number, (e: number) => ReadonlyArray<number>>([
  [binaryen.IfId, (e) => [X.If!.getCondition!(e), X.If!.getIfTrue!(e), X.If!.getIfFalse!(e)]],
  [binaryen.BreakId, (e) => [X.Break!.getCondition!(e), X.Break!.getValue!(e)]],
  [binaryen.SwitchId, (e) => [X.Switch!.getCondition!(e), X.Switch!.getValue!(e)]],
  [binaryen.CallId, (e) => operands(X.Call!, e)],
  [binaryen.CallIndirectId, (e) => [...operands(X.CallIndirect!, e), X.CallIndirect!.getTarget!(e)]],
  [binaryen.LocalSetId, (e) => [X.LocalSet!.getValue!(e)]],
  [binaryen.GlobalSetId, (e) => [X.GlobalSet!.getValue!(e)]],
  [binaryen.LoadId, (e) => [X.Load!.getPtr!(e)]],
  [binaryen.StoreId, (e) => [X.Store!.getPtr!(e), X.Store!.getValue!(e)]],
  [binaryen.UnaryId, (e) => [X.Unary!.getValue!(e)]],
  [binaryen.BinaryId, (e) => [X.Binary!.getLeft!(e), X.Binary!.getRight!(e)]],
  [binaryen.SelectId, (e) => [X.Select!.getIfTrue!(e), X.Select!.getIfFalse!(e), X.Select!.getCondition!(e)]],
  [binaryen.DropId, (e) => [X.Drop!.getValue!(e)]],
  [binaryen.ReturnId, (e) => [X.Return!.getValue!(e)]],
  [binaryen.MemoryGrowId, (e) => [X.MemoryGrow!.getDelta!(e)]],
  [binaryen.AtomicRMWId, (e) => [X.AtomicRMW!.getPtr!(e), X.AtomicRMW!.getValue!(e)]],
  [binaryen.AtomicCmpxchgId, (e) => [X.AtomicCmpxchg!.getPtr!(e), X.AtomicCmpxchg!.getExpected!(e), X.AtomicCmpxchg!.getReplacement!(e)]],
  [binaryen.AtomicWaitId, (e) => [X.AtomicWait!.getPtr!(e), X.AtomicWait!.getExpected!(e), X.AtomicWait!.getTimeout!(e)]],
  [binaryen.AtomicNotifyId, (e) => [X.AtomicNotify!.getPtr!(e), X.AtomicNotify!.getNotifyCount!(e)]],
  [binaryen.SIMDExtractId, (e) => [X.SIMDExtract!.getVec!(e)]],
  [binaryen.SIMDReplaceId, (e) => [X.SIMDReplace!.getVec!(e), X.SIMDReplace!.getValue!(e)]],
  [binaryen.SIMDShuffleId, (e) => [X.SIMDShuffle!.getLeft!(e), X.SIMDShuffle!.getRight!(e)]],
  [binaryen.SIMDTernaryId, (e) => [X.SIMDTernary!.getA!(e), X.SIMDTernary!.getB!(e), X.SIMDTernary!.getC!(e)]],
  [binaryen.SIMDShiftId, (e) => [X.SIMDShift!.getVec!(e), X.SIMDShift!.getShift!(e)]],
  [binaryen.SIMDLoadId, (e) => [X.SIMDLoad!.getPtr!(e)]],
  [binaryen.SIMDLoadStoreLaneId, (e) => [X.SIMDLoadStoreLane!.getPtr!(e), X.SIMDLoadStoreLane!.getVec!(e)]],
  [binaryen.MemoryInitId, (e) => [X.MemoryInit!.getDest!(e), X.MemoryInit!.getOffset!(e), X.MemoryInit!.getSize!(e)]],
  [binaryen.MemoryCopyId, (e) => [X.MemoryCopy!.getDest!(e), X.MemoryCopy!.getSource!(e), X.MemoryCopy!.getSize!(e)]],
  [binaryen.MemoryFillId, (e) => [X.MemoryFill!.getDest!(e), X.MemoryFill!.getValue!(e), X.MemoryFill!.getSize!(e)]],
  [binaryen.RefIsNullId, (e) => [X.RefIsNull!.getValue!(e)]],
  [binaryen.RefEqId, (e) => [X.RefEq!.getLeft!(e), X.RefEq!.getRight!(e)]],
  [binaryen.RefAsId, (e) => [X.RefAs!.getValue!(e)]],
  [binaryen.TableGetId, (e) => [X.TableGet!.getIndex!(e)]],
  [binaryen.TableSetId, (e) => [X.TableSet!.getIndex!(e), X.TableSet!.getValue!(e)]],
  [binaryen.TableGrowId, (e) => [X.TableGrow!.getValue!(e), X.TableGrow!.getDelta!(e)]],
  [binaryen.TryId, (e) => [X.Try!.getBody!(e), ...Array.from({ length: X.Try!.getNumCatchBodies!(e) }, (_, i) => X.Try!.getCatchBodyAt!(e, i))]],
  [binaryen.ThrowId, (e) => operands(X.Throw!, e)],
  [binaryen.TupleMakeId, (e) => operands(X.TupleMake!, e)],
  [binaryen.TupleExtractId, (e) => [X.TupleExtract!.getTuple!(e)]],
  ...[
    binaryen.LocalGetId, binaryen.GlobalGetId, binaryen.ConstId, binaryen.MemorySizeId, binaryen.NopId, binaryen.UnreachableId,
    binaryen.AtomicFenceId, binaryen.RefNullId, binaryen.RefFuncId, binaryen.TableSizeId, binaryen.DataDropId, binaryen.RethrowId, binaryen.PopId
  ].map((id) => [id, () => []] as [number, (e: number) => ReadonlyArray<number>])
])

const children = (e: binaryen.ExpressionRef, id: number): ReadonlyArray<number> => {
  const of = CHILDREN.get(id)
  if (of === undefined) throw new Error(`an instruction metering does not walk (Binaryen expression ${id}): it runs on worker threads`)
  return of(e)
}
