/**
 * Prints CI's closing line, `N passed, N failed, N skipped`, after vitest's own summary.
 * Unhandled errors count as failures so that a run that crashed never reads as green.
 */
import type { Reporter } from "vitest/reporters"

interface TaskLike {
  readonly type: string
  readonly mode: string
  readonly result?: { readonly state?: string }
  readonly tasks?: ReadonlyArray<TaskLike>
}

const count = (tasks: ReadonlyArray<TaskLike>, acc: { passed: number; failed: number; skipped: number }) => {
  for (const task of tasks) {
    if (task.type === "test") {
      const state = task.result?.state
      if (task.mode === "skip" || task.mode === "todo" || state === "skip" || state === "todo") acc.skipped++
      else if (state === "pass") acc.passed++
      else acc.failed++
    } else if (task.tasks) {
      if (task.type === "suite" && task.result?.state === "fail" && task.tasks.length === 0) acc.failed++
      count(task.tasks, acc)
    }
  }
  return acc
}

export default class SummaryReporter implements Reporter {
  onFinished(files: ReadonlyArray<TaskLike> = [], errors: ReadonlyArray<unknown> = []) {
    const acc = count(files, { passed: 0, failed: 0, skipped: 0 })
    // A file that failed to load has no tests but a failed result: count it once.
    for (const file of files) {
      if (file.result?.state === "fail" && (file.tasks?.length ?? 0) === 0) acc.failed++
    }
    acc.failed += errors.length
    process.stdout.write(`\n${acc.passed} passed, ${acc.failed} failed, ${acc.skipped} skipped\n`)
  }
}
