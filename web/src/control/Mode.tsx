// The room's mode and phase on its tile: the phase as a badge (what the room is doing now:
// the schedule, the pause, the mode, the line), and the mode switch (queue, passthrough,
// sold out), changed through `PUT …/config` at once, each switch confirmed first.
import { useState } from 'preact/hooks';
import { ApiError, type Api, type AuditResult, type Mode, type Phase, type RoomView } from './api';

/** What each phase is called on the tile. */
export const PHASE_LABELS: Record<Phase, string> = {
  idle: 'Idle',
  pre_queue: 'Before the line opens',
  draw: 'Draw',
  queueing: 'Queueing',
  paused: 'Paused',
  passthrough: 'Passthrough',
  sold_out: 'Sold out',
  closed: 'Closed',
};

/** What each mode does, as the switch says it. */
export const MODE_LABELS: Record<Mode, string> = {
  queue: 'Queue',
  passthrough: 'Passthrough: let everybody in',
  sold_out: 'Sold out: turn the line and newcomers away',
};

const MODES: Mode[] = ['queue', 'passthrough', 'sold_out'];

/** The phase badge; nothing for a server that does not report one. */
export function PhaseBadge({ phase }: { phase?: Phase }) {
  if (!phase) return null;
  return (
    <span class={`cr-badge cr-badge-phase cr-phase-${phase}`} data-stat="phase">
      {PHASE_LABELS[phase] ?? phase}
    </span>
  );
}

/** The mode switch; nothing for a server that does not report a mode. */
export function ModeSwitch(props: {
  id: string;
  room: RoomView;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { room: r, api } = props;
  const [asked, setAsked] = useState<Mode | null>(null);
  const [busy, setBusy] = useState(false);
  const [notice, setNotice] = useState<{ ok: boolean; text: string } | null>(null);
  if (!r.mode) return null;

  const apply = async (mode: Mode) => {
    setBusy(true);
    setNotice(null);
    try {
      const res: { settings: { mode?: Mode }; audit: AuditResult } = await api.configure(r.room, { mode });
      const audit = res.audit.written ? '' : ` Not recorded in the audit log: ${res.audit.error ?? 'write failed'}.`;
      setNotice({ ok: true, text: `Mode: ${MODE_LABELS[res.settings.mode ?? mode]}.${audit}` });
      props.refresh();
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
      if (e.unauthorized) props.onUnauthorized(e);
      else setNotice({ ok: false, text: `Mode change failed: ${e.message}` });
    } finally {
      setBusy(false);
      setAsked(null);
    }
  };

  return (
    <div class="cr-mode" data-testid="mode">
      <label for={`${props.id}-mode`}>Mode</label>{' '}
      <select
        id={`${props.id}-mode`}
        value={asked ?? r.mode}
        disabled={busy}
        onChange={(e) => {
          const mode = (e.currentTarget as HTMLSelectElement).value as Mode;
          setNotice(null);
          setAsked(mode === r.mode ? null : mode);
        }}
      >
        {MODES.map((m) => (
          <option key={m} value={m}>
            {MODE_LABELS[m]}
          </option>
        ))}
      </select>
      {asked && (
        <>
          {' '}
          <button type="button" class="cr-btn cr-btn-warn" disabled={busy} onClick={() => void apply(asked)} data-action="mode">
            Switch to {asked.replace('_', ' ')}
          </button>{' '}
          <button type="button" class="cr-btn" disabled={busy} onClick={() => setAsked(null)}>
            Cancel
          </button>
        </>
      )}
      {notice && (
        <p class={notice.ok ? 'cr-msg cr-msg-ok' : 'cr-msg cr-msg-error'} role="status">
          {notice.text}
        </p>
      )}
    </div>
  );
}
