// The model gallery: the catalog (downloads with per-file and total
// progress, speed, cancel, resume) and every model found on disk (load,
// delete, disk use), unsupported architectures marked as such, and a
// "Vision" badge on every model that can see images.
import { api, errorText, type CatalogEntry, type DownloadProgress, type EngineStatus, type Gallery, type LocalModel } from './api';
import { bytes, percent, rate } from './format';
import { clear, h } from './dom';
import { confirmDialog } from './modal';

export class ModelsView {
  readonly el: HTMLElement;
  private gallery: Gallery | null = null;
  private progress = new Map<string, DownloadProgress>();
  private status: EngineStatus | null = null;

  constructor(private toast: (m: string) => void) {
    this.el = h('div', { class: 'page models-page', 'data-testid': 'models-page' });
  }

  async refresh(): Promise<void> {
    try {
      this.gallery = await api.listModels();
    } catch (e) {
      this.toast(errorText(e));
    }
    this.render();
  }

  setStatus(s: EngineStatus): void {
    this.status = s;
    if (this.el.isConnected) this.render();
  }

  onProgress(p: DownloadProgress): void {
    this.progress.set(p.id, p);
    const bar = this.el.querySelector<HTMLElement>(`[data-download="${CSS.escape(p.id)}"]`);
    if (bar) bar.replaceWith(this.progressBlock(p));
    else if (this.el.isConnected) this.render();
  }

  onDone(id: string): void {
    this.progress.delete(id);
    void this.refresh();
  }

  private render(): void {
    clear(this.el);
    const g = this.gallery;
    this.el.append(h('h1', {}, 'Models'));
    const s = this.status;
    this.el.append(h('section', { class: 'card loaded-card', 'data-testid': 'loaded-model' },
      h('div', {},
        h('div', { class: 'label' }, 'Loaded'),
        h('div', { class: 'title-row' },
          h('span', { class: 'title' }, s?.state === 'loading' ? `Loading ${s.loading}…` : s?.model?.name ?? 'No model loaded'),
          s?.model?.vision ? h('span', { class: 'badge', 'data-testid': 'vision-badge' }, 'Vision') : null),
        s?.model ? h('div', { class: 'muted' }, `${s.model.architecture} · ${s.model.quantization ?? 'float'} · context ${s.model.max_context}${s.model.vision ? '' : ' · text only'}`) : null,
        s?.error ? h('div', { class: 'error-note' }, s.error.message) : null),
      s?.state === 'loading' ? h('div', { class: 'spinner', 'aria-label': 'Loading' }) :
        s?.model ? h('button', { onclick: () => void this.act(() => api.unloadModel()) }, 'Unload') : null));
    if (!g) return;

    this.el.append(h('h2', {}, 'Gallery'));
    const grid = h('div', { class: 'model-grid' });
    for (const m of g.catalog) grid.append(this.catalogCard(m));
    this.el.append(grid);

    this.el.append(h('h2', {}, 'On this Mac'), h('p', { class: 'muted' },
      `${bytes(g.disk_bytes)} in ${g.local.length} model${g.local.length === 1 ? '' : 's'} · ${g.models_dir}${g.hf_cache_dir ? ` · ${g.hf_cache_dir}` : ''}`));
    const table = h('div', { class: 'local-list', 'data-testid': 'local-models' });
    for (const m of g.local) table.append(this.localRow(m));
    if (g.local.length === 0) table.append(h('p', { class: 'muted' }, 'No models on disk yet.'));
    this.el.append(table);
  }

  private catalogCard(m: CatalogEntry): HTMLElement {
    const loaded = this.status?.model?.id === m.local_id && m.local_id != null;
    const p = this.progress.get(m.id);
    let action: HTMLElement;
    if (!m.supported) action = h('span', { class: 'badge warn' }, `${m.architecture}: not supported yet`);
    else if (loaded) action = h('span', { class: 'badge ok' }, 'Loaded');
    else if (m.local_id) action = h('button', { class: 'primary', onclick: () => void this.load(m.local_id!) }, 'Load');
    else if (m.downloading || p) action = h('button', { onclick: () => void this.act(() => api.cancelDownload(m.id)) }, 'Cancel');
    else if (m.source.kind === 'hub') action = h('button', { onclick: () => void this.download(m.id) }, m.partial ? 'Resume download' : 'Download');
    else action = h('span', { class: 'muted' }, 'Run scripts/setup.sh to install');
    return h('div', { class: `card model-card${m.supported ? '' : ' unsupported'}`, 'data-testid': 'catalog-model', 'data-model-id': m.id },
      h('div', { class: 'title' }, m.display_name),
      h('div', { class: 'badges' },
        m.vision ? h('span', { class: 'badge' }, 'Vision') : null,
        m.thinking ? h('span', { class: 'badge' }, 'Thinking') : null,
        h('span', { class: 'badge subtle' }, `${m.bits}-bit`),
        m.is_default ? h('span', { class: 'badge subtle' }, 'Default') : null),
      h('div', { class: 'muted' }, `${bytes(m.size_bytes)} · context ${m.context_length.toLocaleString()} · ${m.architecture}`),
      p ? this.progressBlock(p) : null,
      h('div', { class: 'card-actions' }, action));
  }

  private progressBlock(p: DownloadProgress): HTMLElement {
    return h('div', { class: 'download', 'data-download': p.id },
      h('progress', { max: 100, value: percent(p.bytes_done, p.bytes_total) }),
      h('div', { class: 'muted small' },
        `${bytes(p.bytes_done)} / ${bytes(p.bytes_total)} · ${rate(p.bytes_per_second)} · file ${Math.min(p.files_done + 1, p.files_total)}/${p.files_total}`),
      h('div', { class: 'muted small' }, `${p.file}: ${percent(p.file_bytes_done, p.file_bytes_total)}%`));
  }

  private localRow(m: LocalModel): HTMLElement {
    const loaded = this.status?.model?.id === m.id;
    const why = m.error ?? (m.partial ? 'download not finished' : !m.supported ? `${m.architecture ?? 'unknown'} architecture not supported` : null);
    return h('div', { class: 'local-row', 'data-testid': 'local-model', 'data-model-id': m.id },
      h('div', { class: 'local-main' },
        h('div', { class: 'title-row' },
          h('span', { class: 'title' }, m.name),
          m.vision ? h('span', { class: 'badge', 'data-testid': 'vision-badge' }, 'Vision') : null),
        h('div', { class: 'muted small' }, `${m.format.toUpperCase()} · ${m.architecture ?? '?'} · ${bytes(m.size_bytes)} · ${m.path}`),
        why ? h('div', { class: 'warn-text small' }, why) : null),
      h('div', { class: 'row-actions' },
        loaded ? h('span', { class: 'badge ok' }, 'Loaded')
          : m.supported ? h('button', { class: 'primary', 'data-testid': 'load-model', onclick: () => void this.load(m.id) }, 'Load') : null,
        m.location.kind !== 'user_file' && !loaded ? h('button', { class: 'danger-text', onclick: () => void this.remove(m) }, 'Delete') : null));
  }

  private async load(id: string): Promise<void> {
    await this.act(() => api.loadModel(id));
  }

  private async download(id: string): Promise<void> {
    await this.act(() => api.downloadModel(id));
    await this.refresh();
  }

  private async remove(m: LocalModel): Promise<void> {
    if (!await confirmDialog('Delete this model?', `${m.name} (${bytes(m.size_bytes)}) will be removed from disk.`, 'Delete')) return;
    await this.act(async () => { const freed = await api.deleteModel(m.id); this.toast(`Freed ${bytes(freed)}`); });
    await this.refresh();
  }

  private async act(f: () => Promise<unknown>): Promise<void> {
    try { await f(); } catch (e) { this.toast(errorText(e)); }
  }
}
