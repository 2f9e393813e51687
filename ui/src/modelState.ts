// One reading of the engine's status for every place that names the model:
// the header's pill, the status bar, the composer's model line and the empty
// chat. Each used to read the status its own way, and the header was drawn
// before the first status arrived and never again: after a restart it said
// "No model loaded" while the status bar and the composer said the model was
// ready (issue 29). App.setStatus hands each status to all of them at once.
import type { EngineStatus, LoadedModel } from './api';
import type { ModelState } from './chatView';

/** What the engine's model is doing, as the views tell it. */
export type ModelView =
  | { kind: 'loading'; name: string }
  | { kind: 'ready'; model: LoadedModel }
  /** Unloaded after the idle time: the next message loads it again. */
  | { kind: 'idle'; model: LoadedModel }
  | { kind: 'failed'; message: string }
  | { kind: 'none' };

export function modelView(s: EngineStatus | null): ModelView {
  if (!s) return { kind: 'none' };
  if (s.state === 'loading') return { kind: 'loading', name: s.loading ?? '' };
  if (s.model) return { kind: 'ready', model: s.model };
  if (s.idle_unloaded && !s.error) return { kind: 'idle', model: s.idle_unloaded };
  if (s.error) return { kind: 'failed', message: s.error.message };
  return { kind: 'none' };
}

/** The model that answers the next message: the loaded one, or the one
 * unloaded while idle (the message loads it again). */
export function answeringModel(v: ModelView): LoadedModel | null {
  return v.kind === 'ready' || v.kind === 'idle' ? v.model : null;
}

/** The header's model pill. */
export function headerLabel(v: ModelView): string {
  switch (v.kind) {
    case 'loading': return `Loading ${v.name}…`;
    case 'ready': return v.model.name;
    case 'idle': return `${v.model.name} (unloaded while idle)`;
    default: return 'No model loaded';
  }
}

/** The status bar's first item. */
export function statusLabel(v: ModelView): string {
  switch (v.kind) {
    case 'loading': return `Loading ${v.name}…`;
    case 'ready': return v.model.name;
    case 'idle': return `${v.model.name} unloaded while idle: your next message loads it again`;
    case 'failed': return `Load failed: ${v.message}`;
    default: return 'No model loaded';
  }
}

/** The empty chat's and the failed replies' view of the model. */
export function chatModelState(v: ModelView): ModelState {
  if (v.kind === 'loading') return { state: 'loading', name: v.name };
  const answering = answeringModel(v);
  return answering ? { state: 'ready', model: answering } : { state: 'unloaded' };
}
