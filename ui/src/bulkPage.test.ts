// The Bulk page (issue 29): Run is off with the reason beside it when the
// model cannot see images, one Run on the page, an export's "Saved to"
// stays with its own job, long answers are folded until clicked.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { BulkView, clamped } from './bulkView';
import { whyCannotRun } from './bulkReadiness';
import type { BulkJob, BulkRow } from './api';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const job = (id: number, over: Partial<BulkJob> = {}): BulkJob => ({
  id, prompt: `Job ${id}`, answer_format: null, max_tokens: 64, status: 'finished', model: 'Tiny VL', total: 1, done: 1, failed: 0, created_at: 0, updated_at: 0, ...over,
} as unknown as BulkJob);
const row = (answer: string): BulkRow => ({
  position: 0, name: 'a.png', image: null, status: 'done', answer, fields: null, error_code: null, error: null, prompt_tokens: 10, generated_tokens: 5, seconds: 1,
} as unknown as BulkRow);

function page(jobs: BulkJob[], rows: BulkRow[]) {
  mockIPC((cmd, args) => {
    if (cmd === 'list_bulk_jobs') return jobs;
    if (cmd === 'bulk_job_rows') return rows;
    if (cmd === 'export_bulk_job') return `/data/exports/job-${(args as { jobId: number }).jobId}.csv`;
    return null;
  });
  const view = new BulkView({ pickFiles: async () => [], toast: () => {} });
  document.body.append(view.el);
  return view;
}
const q = (id: string) => document.querySelector<HTMLElement>(`[data-testid=${id}]`);

describe('the Bulk page', () => {
  it('turns Run off with the reason shown for no model or one that reads text only', () => {
    const view = page([], []);
    view.setModel({ name: 'SmolLM2', vision: false });
    expect((q('bulk-run') as HTMLButtonElement).disabled).toBe(true);
    expect(q('bulk-run-blocked')!.hidden).toBe(false);
    expect(q('bulk-run-blocked')!.textContent).toBe(whyCannotRun({ name: 'SmolLM2', vision: false }));
    expect(q('bulk-run-blocked')!.textContent).toMatch(/^SmolLM2 reads text only/);
    view.setModel(null);
    expect(q('bulk-run-blocked')!.textContent).toMatch(/^No model is loaded/);
    view.setModel({ name: 'Tiny VL', vision: true });
    expect((q('bulk-run') as HTMLButtonElement).disabled).toBe(false);
    expect(q('bulk-run-blocked')!.hidden).toBe(true);
  });

  it('has one Run; a job that never ran is started from its own pane, off too for a text-only model', async () => {
    const view = page([job(1, { status: 'ready', done: 0 })], [{ ...row(''), status: 'pending' } as BulkRow]);
    view.setModel({ name: 'SmolLM2', vision: false });
    await view.refresh();
    const runs = [...document.querySelectorAll('button')].filter((b) => b.textContent === 'Run');
    expect(runs.length).toBe(1);
    const start = q('bulk-resume') as HTMLButtonElement;
    expect(start.textContent).toBe('Start');
    expect(start.disabled).toBe(true);
  });

  it('shows an export’s path under its own job only', async () => {
    const view = page([job(1), job(2)], [row('red')]);
    view.setModel({ name: 'Tiny VL', vision: true });
    await view.refresh();
    q('bulk-export-csv')!.click();
    await vi.waitFor(() => expect(q('bulk-exported')?.textContent).toBe('Saved to /data/exports/job-1.csv'));
    const items = document.querySelectorAll<HTMLButtonElement>('[data-testid=bulk-job-item]');
    items[1].click();
    await vi.waitFor(() => expect(document.querySelector('[data-testid=bulk-job-item][aria-current=true]')?.textContent).toMatch(/^Job 2/));
    expect(q('bulk-exported')).toBeNull();
  });

  it('folds a long answer to a few lines; a click or Enter shows it whole', () => {
    expect(clamped('short').getAttribute('role')).toBeNull();
    const cell = clamped('It is the largest of all. '.repeat(40));
    expect(cell.getAttribute('aria-expanded')).toBe('false');
    expect(cell.tabIndex).toBe(0);
    cell.click();
    expect(cell.classList.contains('expanded')).toBe(true);
    cell.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    expect(cell.getAttribute('aria-expanded')).toBe('false');
  });
});
