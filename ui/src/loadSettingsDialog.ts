// The "Load settings" dialog of a model on disk (Models page): context
// length, KV-cache quantization and running sequences remembered for this
// model, with the fit verdict asked again for the values chosen; "Use
// Settings" forgets them. For the loaded model, saving reloads it.
import { api, errorText, type AppError, type FitCheck, type ModelLoadSettings, type ModelLoadSettingsView } from './api';
import { clear, h } from './dom';
import { fitBlock } from './fitVerdict';
import { draftModelsNote, draftModelsNoteTitle, readLoadForm, speedUpHint, speedUpOptions, speedUpValue } from './loadSettings';

/** Typing in a field asks the fit again this long after the last key. */
const FIT_DELAY_MS = 250;

/** What the dialog did: saved (and reloaded) or forgot, or nothing. */
export type LoadSettingsOutcome = 'saved' | 'reloaded' | 'forgotten' | null;

export async function loadSettingsDialog(model: { id: string; name: string }, loaded: boolean, toast: (m: string) => void): Promise<LoadSettingsOutcome> {
  let view: ModelLoadSettingsView;
  try {
    view = await api.getModelLoadSettings(model.id);
  } catch (e) {
    toast(errorText(e));
    return null;
  }
  return new Promise((resolve) => {
    const close = (outcome: LoadSettingsOutcome) => { overlay.remove(); document.removeEventListener('keydown', onKey); resolve(outcome); };
    const onKey = (e: KeyboardEvent) => { if (e.key === 'Escape') close(null); };
    const d = view.defaults;
    const context = h('input', { type: 'number', min: 0, max: 1048576, step: 256, name: 'context', 'data-testid': 'load-setting-context' });
    const kvBits = h('select', { name: 'kv_bits', 'data-testid': 'load-setting-kv_bits' },
      h('option', { value: '0' }, 'Off'), h('option', { value: '8' }, '8-bit'), h('option', { value: '4' }, '4-bit'));
    const maxRunning = h('input', { type: 'number', min: 1, max: 64, step: 1, name: 'max_running', 'data-testid': 'load-setting-max_running' });
    const options = speedUpOptions(view.speed_up_choices);
    const speedUp = h('select', { name: 'speed_up', 'data-testid': 'load-setting-speed_up' },
      ...options.map(([value, label]) => h('option', { value }, label)));
    const speedUpHintText = h('span', { class: 'muted small field-hint', 'data-testid': 'speed-up-hint' });
    const fill = (s: ModelLoadSettings) => {
      context.value = String(s.max_context);
      kvBits.value = String(s.kv_bits);
      maxRunning.value = String(s.max_running);
      const value = speedUpValue(s.speed_up);
      // a choice the model no longer has (its draft deleted) still shows, to be changed
      if (!options.some(([v]) => v === value)) speedUp.append(h('option', { value }, `${value} (not available)`));
      speedUp.value = value;
      speedUpHintText.textContent = speedUpHint(value, view.speed_up_choices);
    };
    fill(view.settings);
    speedUp.addEventListener('change', () => { speedUpHintText.textContent = speedUpHint(speedUp.value, view.speed_up_choices); });
    const draftNote = draftModelsNote(view.speed_up_choices);
    const problem = h('div', { class: 'error-note', role: 'alert', 'data-testid': 'load-settings-error', hidden: true });
    const fitBox = h('div', { class: 'load-settings-fit', 'data-testid': 'load-settings-fit', 'aria-live': 'polite' });
    const read = () => readLoadForm({ context: context.value, kvBits: kvBits.value, maxRunning: maxRunning.value, speedUp: speedUp.value });

    let asked = 0;
    let timer = 0;
    const askFit = async () => {
      const r = read();
      problem.hidden = !('error' in r);
      problem.textContent = 'error' in r ? r.error : '';
      if ('error' in r) return;
      const round = ++asked;
      const s = r.settings;
      let fit: FitCheck | AppError;
      try {
        fit = await api.fitCheck({ kind: 'local', id: model.id }, s.max_context, s.kv_bits, s.max_running);
      } catch (e) {
        fit = e as AppError;
      }
      if (round !== asked) return; // a later change asked again
      clear(fitBox);
      fitBox.append('level' in fit ? fitBlock(fit) : h('div', { class: 'muted small', 'data-testid': 'fit-error' }, `No fit estimate: ${fit.message}`));
    };
    const later = () => { window.clearTimeout(timer); timer = window.setTimeout(() => void askFit(), FIT_DELAY_MS); };
    for (const input of [context, maxRunning]) input.addEventListener('input', later);
    kvBits.addEventListener('change', () => void askFit());

    const save = async () => {
      const r = read();
      if ('error' in r) { problem.hidden = false; problem.textContent = r.error; return; }
      try {
        const saved = await api.saveModelLoadSettings(model.id, r.settings);
        if (loaded && saved.reload_needed) {
          await api.loadModel(model.id);
          close('reloaded');
        } else close('saved');
      } catch (e) {
        problem.hidden = false;
        problem.textContent = errorText(e);
      }
    };
    const forget = async () => {
      try {
        const after = await api.forgetModelLoadSettings(model.id);
        if (loaded && after.reload_needed) await api.loadModel(model.id);
        close('forgotten');
      } catch (e) { toast(errorText(e)); }
    };
    const row = (label: string, input: HTMLElement, hint: string) =>
      h('label', { class: 'chat-setting' }, h('span', {}, label), h('span', {}, input, h('span', { class: 'muted small field-hint' }, hint)));
    const defaultsText = `Settings: context ${d.max_context ? d.max_context.toLocaleString('en-US') : 'the model’s own'}, KV ${d.kv_bits ? `${d.kv_bits}-bit` : 'off'}, ${d.max_running} at once`;

    const overlay = h('div', { class: 'modal-overlay', onclick: (e: Event) => { if (e.target === overlay) close(null); } },
      h('div', { class: 'modal chat-settings load-settings', role: 'dialog', 'aria-modal': 'true', 'aria-label': `Load settings of ${model.name}`, 'data-testid': 'load-settings-dialog' },
        h('h2', {}, `Load settings · ${model.name}`),
        h('p', { class: 'hint' }, view.remembered
          ? 'This model loads with these settings of its own. '
          : 'This model follows Settings; saving gives it settings of its own. ', defaultsText, '.'),
        h('div', { class: 'chat-settings-form' },
          row('Context length (tokens)', context, '0 uses the model’s own limit.'),
          row('KV-cache quantization', kvBits, 'Fewer bits: long chats take less memory.'),
          row('Max running sequences', maxRunning, 'Answers written at once; each may fill the context, and the fit counts them all.'),
          h('label', { class: 'chat-setting' }, h('span', {}, 'Speed up replies'), h('span', {}, speedUp, speedUpHintText,
            draftNote ? h('details', { class: 'muted small field-hint', 'data-testid': 'draft-models-note' },
              h('summary', {}, draftModelsNoteTitle(view.speed_up_choices)), draftNote) : null))),
        problem,
        fitBox,
        h('div', { class: 'modal-actions' },
          h('button', { 'data-testid': 'load-settings-forget', disabled: !view.remembered, title: 'Forget these: follow Settings', onclick: () => void forget() }, 'Use Settings'),
          h('button', { 'data-testid': 'load-settings-cancel', onclick: () => close(null) }, 'Cancel'),
          h('button', { class: 'primary', 'data-testid': 'load-settings-save', onclick: () => void save() }, loaded ? 'Save and reload' : 'Save'))));
    document.body.append(overlay);
    document.addEventListener('keydown', onKey);
    context.focus();
    void askFit();
  });
}
