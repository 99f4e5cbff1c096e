// A room's events on its tile: the list (times in the operator's time zone with the offset,
// the overrides, upcoming / current / over, the current one marked), a form to add one or
// edit one, and a delete that asks first. Read from `GET …/events` when opened and every
// few seconds while open (an event's state moves with the clock); every write goes through
// the API, which judges it, and an error it names is shown under that field.
import { useEffect, useRef, useState } from 'preact/hooks';

import { ApiError, fieldMessage, type Api } from './api';
import {
  EMPTY_FORM,
  EVENT_FIELDS,
  eventToForm,
  formatInstant,
  formToBody,
  zoneLabel,
  type EventField,
  type EventForm,
  type EventList,
  type EventRef,
  type EventState,
  type RoomEvent,
} from './events';
import { formatCount, formatRate } from './format';

/** How often the open list is read again. */
export const EVENTS_POLL_MS = 3000;

/** What each state is called in the list. */
export const STATE_LABELS: Record<EventState, string> = {
  upcoming: 'Upcoming',
  current: 'Current',
  over: 'Over',
};

type Kind = 'text' | 'long' | 'time' | 'number' | 'lottery';

/** The form's times and overrides: the API's name, its label, and how it is typed. */
const WHEN: [name: EventField, label: string, kind: Kind][] = [
  ['queue_opens_at', 'Line opens', 'time'],
  ['admits_at', 'Doors open', 'time'],
  ['closes_at', 'Closes (optional)', 'time'],
];
const OVERRIDES: [name: EventField, label: string, kind: Kind][] = [
  ['rate', 'Admitted per second', 'number'],
  ['max_active', 'Sessions on the site at once', 'number'],
  ['lottery', 'Lottery', 'lottery'],
  ['title', 'Title of the waiting page', 'text'],
  ['message', 'Message on the waiting page', 'long'],
];

/** The overrides an event sets, as one line: `rate 5/s · max on the site 100 · lottery on`. */
export function describeOverrides(e: RoomEvent): string {
  const parts: string[] = [];
  if (e.rate !== undefined && e.rate !== null) parts.push(`rate ${typeof e.rate === 'number' ? formatRate(e.rate) : e.rate}/s`);
  if (e.max_active !== undefined && e.max_active !== null) {
    parts.push(`max on the site ${typeof e.max_active === 'number' ? formatCount(e.max_active) : e.max_active}`);
  }
  if (e.title !== undefined && e.title !== null) parts.push(`title “${e.title}”`);
  if (e.message !== undefined && e.message !== null) parts.push(`message “${e.message}”`);
  if (e.lottery !== undefined && e.lottery !== null) parts.push(`lottery ${e.lottery ? 'on' : 'off'}`);
  return parts.length ? parts.join(' · ') : 'none: the room’s own settings';
}

/** An event's id as part of an element's id. */
const safe = (eventId: string) => eventId.replace(/[^A-Za-z0-9_-]/g, '_');

/** What an event is called where a name is wanted. */
const label = (e: { name?: string; id: string }) => (e.name ? `“${e.name}”` : e.id);

export function EventsPanel(props: {
  id: string;
  room: string;
  /** The current event as the room's stats name it (servers with events). */
  current?: EventRef | null;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
  /** Open when first drawn (tests). */
  open?: boolean;
}) {
  const { id, room, api } = props;
  const [open, setOpen] = useState(props.open ?? false);
  const [list, setList] = useState<EventList | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  /** The event being edited, or null while adding one. */
  const [editing, setEditing] = useState<RoomEvent | null>(null);
  const [form, setForm] = useState<EventForm>(EMPTY_FORM);
  const [errors, setErrors] = useState<Partial<Record<EventField | 'form', string>>>({});
  const [result, setResult] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [confirming, setConfirming] = useState<string | null>(null);
  const stopped = useRef(false);

  const failure = (err: unknown): ApiError | null => {
    const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
    if (e.unauthorized) {
      props.onUnauthorized(e);
      return null;
    }
    return e;
  };

  const load = async (signal?: AbortSignal) => {
    try {
      const got = await api.events(room, signal);
      if (!stopped.current) {
        setList(got);
        setLoadError(null);
      }
    } catch (err) {
      if (signal?.aborted || stopped.current) return;
      const e = failure(err);
      if (e) setLoadError(`Could not read the events: ${e.message}`);
    }
  };

  useEffect(() => {
    stopped.current = false;
    if (!open) return;
    const controller = new AbortController();
    void load(controller.signal);
    const timer = setInterval(() => void load(controller.signal), EVENTS_POLL_MS);
    return () => {
      clearInterval(timer);
      controller.abort();
    };
  }, [open, room, api, props.current?.id, props.current?.state]);
  useEffect(
    () => () => {
      stopped.current = true;
    },
    [],
  );

  /** Moves the focus after the next render (the element clicked may be gone by then). */
  const focusLater = (elementId: string) => setTimeout(() => document.getElementById(elementId)?.focus(), 0);

  const edit = (field: EventField, value: string) => {
    setForm((f) => ({ ...f, [field]: value }));
    setErrors((e) => ({ ...e, [field]: undefined, form: undefined }));
    setResult(null);
  };

  const startEdit = (e: RoomEvent) => {
    setEditing(e);
    setForm(eventToForm(e));
    setErrors({});
    setResult(null);
    setConfirming(null);
    // The form follows the list: take the operator there.
    focusLater(`${id}-ev-name`);
  };

  const reset = () => {
    setEditing(null);
    setForm(EMPTY_FORM);
    setErrors({});
  };

  const showFieldError = (field: EventField, text: string) => {
    setErrors({ [field]: text });
    document.getElementById(`${id}-ev-${field}`)?.focus();
  };

  const submit = async (ev: Event) => {
    ev.preventDefault();
    const built = formToBody(form);
    if ('errors' in built) {
      const first = EVENT_FIELDS.find((f) => built.errors[f]);
      setErrors(built.errors);
      setResult(null);
      if (first) document.getElementById(`${id}-ev-${first}`)?.focus();
      return;
    }
    setBusy(true);
    setErrors({});
    setResult(null);
    try {
      const saved = editing
        ? await api.updateEvent(room, editing.id, built.body)
        : await api.createEvent(room, built.body);
      setResult(`${editing ? 'Saved' : 'Added'} ${label(saved)} (${STATE_LABELS[saved.state] ?? saved.state}).`);
      reset();
      await load();
      props.refresh();
    } catch (err) {
      const e = failure(err);
      if (!e) return;
      const base = e.field ? e.field.split(/[[.]/)[0] : null;
      const known = EVENT_FIELDS.find((f) => f === base);
      if (known) showFieldError(known, fieldMessage(e));
      else setErrors({ form: `${editing ? 'Not saved' : 'Not added'}: ${e.message}` });
      if (e.status === 404) void load();
    } finally {
      setBusy(false);
    }
  };

  const remove = async (e: RoomEvent) => {
    setBusy(true);
    setResult(null);
    setErrors({});
    try {
      await api.deleteEvent(room, e.id);
      setResult(`Deleted ${label(e)}.`);
      if (editing?.id === e.id) reset();
      focusLater(`${id}-ev-summary`);
      await load();
      props.refresh();
    } catch (err) {
      const f = failure(err);
      if (f) setErrors({ form: `Not deleted: ${f.message}` });
      if (f?.status === 404) void load();
    } finally {
      setBusy(false);
      setConfirming(null);
    }
  };

  const field = (name: EventField, text: string, kind: Kind) => {
    const fid = `${id}-ev-${name}`;
    const err = errors[name];
    const common = {
      id: fid,
      name,
      'aria-invalid': err ? ('true' as const) : undefined,
      'aria-describedby': err ? `${fid}-error` : kind === 'time' ? `${id}-ev-zone` : undefined,
      'aria-required': name === 'queue_opens_at' || name === 'admits_at' ? ('true' as const) : undefined,
    };
    const onInput = (e: Event) => edit(name, (e.currentTarget as HTMLInputElement).value);
    return (
      <div class={`cr-field cr-ev-${name}${err ? ' cr-field-invalid' : ''}`} key={name}>
        <label for={fid}>{text}</label>
        {kind === 'time' && <input {...common} type="datetime-local" step={1} value={form[name]} onInput={onInput} onChange={onInput} />}
        {(kind === 'text' || kind === 'number') && (
          <input
            {...common}
            type="text"
            inputMode={kind === 'number' ? 'decimal' : undefined}
            autocomplete="off"
            spellcheck={kind === 'text' ? undefined : false}
            value={form[name]}
            onInput={onInput}
          />
        )}
        {kind === 'long' && <textarea {...common} rows={2} value={form[name]} onInput={onInput} />}
        {kind === 'lottery' && (
          <select {...common} value={form[name]} onChange={onInput}>
            <option value="">The room’s own</option>
            <option value="true">On: draw by lot before the doors open</option>
            <option value="false">Off: first come, first served</option>
          </select>
        )}
        {err && (
          <p class="cr-field-error" id={`${fid}-error`} data-field-error={name}>
            {err}
          </p>
        )}
      </div>
    );
  };

  const current = props.current;
  const fieldErrors = EVENT_FIELDS.filter((f) => errors[f]);

  return (
    <details
      class="cr-events"
      open={open}
      onToggle={(e) => setOpen((e.currentTarget as HTMLDetailsElement).open)}
      data-testid="events"
    >
      <summary id={`${id}-ev-summary`}>
        Events
        {current && (
          <span class="cr-muted" data-stat="event">
            {' '}
            · now: {current.name || current.id}
          </span>
        )}
      </summary>
      {loadError && <p class="cr-msg cr-msg-error">{loadError}</p>}
      {list === null ? (
        !loadError && <p class="cr-muted">Loading…</p>
      ) : list.events.length === 0 ? (
        <p class="cr-muted">No events: the room runs on its own schedule.</p>
      ) : (
        <ol class="cr-event-list" aria-label={`Events of ${room}`}>
          {list.events.map((e) => {
            const isCurrent = e.id === list.current;
            return (
              <li
                key={e.id}
                class={`cr-event cr-event-${e.state}${isCurrent ? ' cr-event-current' : ''}`}
                data-event-id={e.id}
                data-state={e.state}
                aria-current={isCurrent ? 'true' : undefined}
              >
                <div class="cr-event-head">
                  <h4>{e.name || 'Unnamed event'}</h4>
                  <code class="cr-muted">{e.id}</code>
                  <span class={`cr-badge cr-badge-event cr-event-state-${e.state}`} data-col="state">
                    {STATE_LABELS[e.state] ?? e.state}
                  </span>
                  {isCurrent && e.state !== 'current' && (
                    <span class="cr-badge cr-badge-event cr-event-state-current">In force</span>
                  )}
                </div>
                <dl class="cr-event-times">
                  <div>
                    <dt>Line opens</dt>
                    <dd>
                      <time dateTime={e.queue_opens_at}>{formatInstant(e.queue_opens_at)}</time>
                    </dd>
                  </div>
                  <div>
                    <dt>Doors open</dt>
                    <dd>
                      <time dateTime={e.admits_at}>{formatInstant(e.admits_at)}</time>
                    </dd>
                  </div>
                  <div>
                    <dt>Closes</dt>
                    <dd>{e.closes_at ? <time dateTime={e.closes_at}>{formatInstant(e.closes_at)}</time> : 'stays open'}</dd>
                  </div>
                  <div>
                    <dt>Overrides</dt>
                    <dd data-col="overrides">{describeOverrides(e)}</dd>
                  </div>
                </dl>
                <div class="cr-row-actions">
                  {confirming === e.id ? (
                    <>
                      <span>Delete {label(e)}? This cannot be undone.</span>
                      <button
                        type="button"
                        class="cr-btn cr-btn-danger"
                        disabled={busy}
                        onClick={() => void remove(e)}
                        data-action="confirm-delete-event"
                      >
                        Delete event
                      </button>
                      <button
                        type="button"
                        class="cr-btn"
                        id={`${id}-ev-cancel-${safe(e.id)}`}
                        disabled={busy}
                        onClick={() => {
                          setConfirming(null);
                          focusLater(`${id}-ev-delete-${safe(e.id)}`);
                        }}
                      >
                        Cancel
                      </button>
                    </>
                  ) : (
                    <>
                      <button type="button" class="cr-btn" disabled={busy} onClick={() => startEdit(e)}>
                        Edit<span class="cr-sr"> {label(e)}</span>
                      </button>
                      <button
                        type="button"
                        class="cr-btn cr-btn-danger"
                        id={`${id}-ev-delete-${safe(e.id)}`}
                        disabled={busy}
                        onClick={() => {
                          setResult(null);
                          setConfirming(e.id);
                          // The safe choice first: Enter does not delete.
                          focusLater(`${id}-ev-cancel-${safe(e.id)}`);
                        }}
                      >
                        Delete…<span class="cr-sr"> {label(e)}</span>
                      </button>
                    </>
                  )}
                </div>
              </li>
            );
          })}
        </ol>
      )}
      <form class="cr-event-form" onSubmit={submit} noValidate aria-labelledby={`${id}-ev-title`}>
        <h4 id={`${id}-ev-title`}>{editing ? `Edit ${label(editing)}` : 'Add an event'}</h4>
        {field('name', 'Name (for you; optional)', 'text')}
        <fieldset class="cr-event-group">
          <legend>When</legend>
          <p class="cr-hint" id={`${id}-ev-zone`}>
            In your time zone, {zoneLabel()}.
          </p>
          <div class="cr-event-fields">{WHEN.map(([name, text, kind]) => field(name, text, kind))}</div>
        </fieldset>
        <fieldset class="cr-event-group">
          <legend>Overrides, applied when the event starts (blank: the room’s own)</legend>
          <div class="cr-event-fields">{OVERRIDES.map(([name, text, kind]) => field(name, text, kind))}</div>
        </fieldset>
        <div class="cr-config-buttons">
          <button type="submit" class="cr-btn cr-btn-primary" disabled={busy}>
            {busy ? 'Saving…' : editing ? 'Save changes' : 'Add event'}
          </button>
          <button type="button" class="cr-btn" disabled={busy} onClick={reset}>
            {editing ? 'Cancel editing' : 'Clear'}
          </button>
        </div>
        <div role="alert">
          {errors.form && <p class="cr-msg cr-msg-error">{errors.form}</p>}
          {fieldErrors.length > 0 && (
            <p class="cr-sr">
              {editing ? 'Not saved' : 'Not added'}: {fieldErrors.map((f) => `${f}: ${errors[f]}`).join('; ')}
            </p>
          )}
        </div>
        <div role="status" aria-live="polite">
          {result && <p class="cr-msg cr-msg-ok">{result}</p>}
        </div>
      </form>
    </details>
  );
}
