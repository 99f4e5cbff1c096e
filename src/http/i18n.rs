//! Every string anteroom's own pages say, in every language it speaks, and the choice of
//! language from `Accept-Language` (q-values, English when nothing matches).
//!
//! The waiting page's script has no catalog of its own: the page hands it the strings it
//! needs (`Catalog` serializes into the page's data blob). The operator's `title` and
//! `message` are shown as given; only the default title is translated.

use http::HeaderValue;
use serde::Serialize;

mod challenge;
mod errors;

pub use challenge::ChallengeText;
pub use errors::{ErrorText, Errors};

/// A language the pages are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// English, the fallback when `Accept-Language` matches nothing.
    En,
    /// German.
    De,
    /// Spanish.
    Es,
    /// French.
    Fr,
    /// Arabic, written right to left.
    Ar,
}

impl Lang {
    /// Every language the pages are written in, English first.
    pub const ALL: [Lang; 5] = [Lang::En, Lang::De, Lang::Es, Lang::Fr, Lang::Ar];

    fn from_primary_tag(tag: &str) -> Option<Lang> {
        Some(match tag {
            "en" => Lang::En,
            "de" => Lang::De,
            "es" => Lang::Es,
            "fr" => Lang::Fr,
            "ar" => Lang::Ar,
            _ => return None,
        })
    }

    /// This language's strings.
    pub fn catalog(self) -> &'static Catalog {
        match self {
            Lang::En => &EN,
            Lang::De => &DE,
            Lang::Es => &ES,
            Lang::Fr => &FR,
            Lang::Ar => &AR,
        }
    }

    /// This language's strings of the proof of work at the door.
    pub fn challenge(self) -> &'static ChallengeText {
        match self {
            Lang::En => &challenge::EN,
            Lang::De => &challenge::DE,
            Lang::Es => &challenge::ES,
            Lang::Fr => &challenge::FR,
            Lang::Ar => &challenge::AR,
        }
    }

    /// This language's error pages.
    pub fn errors(self) -> &'static Errors {
        match self {
            Lang::En => &errors::EN,
            Lang::De => &errors::DE,
            Lang::Es => &errors::ES,
            Lang::Fr => &errors::FR,
            Lang::Ar => &errors::AR,
        }
    }
}

/// The best language for an `Accept-Language` header: the highest q-value among the ones
/// spoken here (a regional tag like `de-AT` counts as `de`; the first listed wins a tie),
/// English when none is.
pub fn negotiate(header: Option<&HeaderValue>) -> Lang {
    let Some(value) = header.and_then(|v| v.to_str().ok()) else {
        return Lang::En;
    };
    let mut best: Option<(f32, Lang)> = None;
    for range in value.split(',').take(32) {
        let mut parts = range.split(';');
        let tag = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if !(q > 0.0 && q <= 1.0) {
            continue;
        }
        let primary = tag.split(['-', '_']).next().unwrap_or("");
        let lang = if primary == "*" {
            Some(Lang::En)
        } else {
            Lang::from_primary_tag(primary)
        };
        if let Some(lang) = lang
            && best.is_none_or(|(b, _)| q > b)
        {
            best = Some((q, lang));
        }
    }
    best.map_or(Lang::En, |(_, l)| l)
}

/// One language's strings. `{n}`, `{min}` and `{max}` are filled in by the page.
#[derive(Debug, Serialize)]
pub struct Catalog {
    /// The BCP 47 primary tag (`en`, `de`, …), used as the page's `lang` attribute.
    pub code: &'static str,
    /// `ltr` or `rtl`.
    pub dir: &'static str,
    /// The title shown when the room's is the default one.
    pub title_default: &'static str,
    /// Label of the visitor's position in line.
    pub your_place: &'static str,
    /// Screen-reader announcement of the position; `{n}` is the position.
    pub announce: &'static str,
    /// Label of how many are waiting in total.
    pub in_line_now: &'static str,
    /// Label of the estimated wait.
    pub estimated_wait: &'static str,
    /// The estimate when the wait is under a minute.
    pub eta_under_minute: &'static str,
    /// Shown instead of a range until the room has seen its line move enough to stand
    /// behind one.
    pub eta_estimating: &'static str,
    /// A wait in seconds; `{n}` is the number (used below 90 s).
    pub eta_secs: &'static str,
    /// A wait in whole minutes; `{n}` is the number.
    pub eta_mins: &'static str,
    /// A range of two waits; `{min}` and `{max}` are already formatted.
    pub eta_range: &'static str,
    /// Shown while the room is paused; reassures that the place is kept.
    pub paused: &'static str,
    /// Shown on the waiting page while the store cannot be reached.
    pub stalled: &'static str,
    /// Shown for the moment between admission and the redirect to the site.
    pub admitted: &'static str,
    /// Shown while the live stream reconnects.
    pub reconnecting: &'static str,
    /// The standing note under the line: keep the page open, reloading does not help.
    pub note: &'static str,
    /// Label of the countdown to the queue opening (before `queue_opens_at`).
    pub opens_in: &'static str,
    /// The note shown before the queue opens.
    pub before_open_note: &'static str,
    /// Label of the countdown to the lottery's doors (`admits_at`).
    pub doors_open_in: &'static str,
    /// Label of how many have entered the lottery draw so far.
    pub entered: &'static str,
    /// The note shown during the draw: arrival time does not matter.
    pub draw_note: &'static str,
    /// A countdown's days part; `{n}` is the number.
    pub days: &'static str,
    /// One-line notice that the line is closed (`closes_at` has passed).
    pub closed: &'static str,
    /// Heading of the page for a newcomer refused by the join limit or a share.
    pub refused_title: &'static str,
    /// Body of the refused page.
    pub refused_detail: &'static str,
    /// Heading of the page for a newcomer turned away by the queue breaker.
    pub full_title: &'static str,
    /// Body of the line-full page.
    pub full_detail: &'static str,
    /// Heading of the sold-out page (the room's sold-out mode).
    pub sold_out_title: &'static str,
    /// Body of the sold-out page when the operator left no message.
    pub sold_out_detail: &'static str,
    /// Label of the visitor's reference, for support.
    pub reference: &'static str,
    /// The lottery receipt: its heading, and the labels of the visitor's
    /// draw hash, place in the draw and visitor id (what `anteroom verify-draw` needs).
    pub receipt: &'static str,
    /// Receipt label of the visitor's draw hash.
    pub draw_hash: &'static str,
    /// Receipt label of the visitor's place in the draw.
    pub draw_place: &'static str,
    /// Receipt label of the visitor id, to check with `anteroom verify-draw`.
    pub visitor_id: &'static str,
    /// Heading of the page shown once the room is closed.
    pub closed_title: &'static str,
    /// Body of the closed page.
    pub closed_detail: &'static str,
    /// Body of the holding page shown while the store cannot be reached.
    pub stalled_detail: &'static str,
    /// A client banned by the abuse registry.
    pub banned_title: &'static str,
    /// Body of the page shown to a banned client.
    pub banned_detail: &'static str,
}

/// The room title as shown: the operator's, or the translated default.
pub fn title<'a>(configured: &'a str, catalog: &'static Catalog) -> &'a str {
    if configured.is_empty() || configured == EN.title_default {
        catalog.title_default
    } else {
        configured
    }
}

impl Catalog {
    /// An estimated wait as a range, in this language (the script does the same).
    pub fn eta(&self, min: u64, max: u64) -> String {
        let one = |secs: u64| {
            if secs < 90 {
                self.eta_secs.replace("{n}", &secs.max(1).to_string())
            } else {
                self.eta_mins
                    .replace("{n}", &((secs + 30) / 60).to_string())
            }
        };
        if max == 0 {
            return self.eta_under_minute.to_owned();
        }
        let (a, b) = (one(min.min(max)), one(max));
        if a == b {
            b
        } else {
            self.eta_range.replace("{min}", &a).replace("{max}", &b)
        }
    }

    /// The screen-reader announcement for `position`, in this language.
    pub fn announce(&self, position: u64) -> String {
        self.announce.replace("{n}", &position.to_string())
    }
}

static EN: Catalog = Catalog {
    code: "en",
    dir: "ltr",
    title_default: "You're in line",
    your_place: "Your place in line",
    announce: "You are number {n} in line.",
    in_line_now: "In line now",
    estimated_wait: "Estimated wait",
    eta_under_minute: "under a minute",
    eta_estimating: "estimating…",
    eta_secs: "{n} s",
    eta_mins: "{n} min",
    eta_range: "{min} – {max}",
    paused: "The line is paused for a moment. You keep your place.",
    stalled: "We're having trouble reaching the line. You keep your place, and this page carries on by itself.",
    admitted: "It's your turn. Taking you to the site…",
    reconnecting: "Reconnecting…",
    note: "Keep this page open: it updates by itself and takes you to the site when it's your turn. Reloading won't move you forward.",
    opens_in: "The line opens in",
    before_open_note: "Stay on this page: you'll join the line as soon as it opens.",
    doors_open_in: "Doors open in",
    entered: "Entered so far",
    draw_note: "Everyone who arrives before the doors open gets a place drawn at random, so there's no need to hurry.",
    days: "{n} d",
    closed: "This line is closed.",
    refused_title: "Too many requests",
    refused_detail: "Too many visitors joined from your network in a short time. Please wait a moment; this page will try again by itself.",
    full_title: "The line is full",
    full_detail: "So many people are already waiting that the line cannot take more right now. Please try again in a little while.",
    sold_out_title: "Sold out",
    sold_out_detail: "Everything is gone: this sale is sold out. Thank you for waiting with us.",
    reference: "Your reference",
    receipt: "Your draw receipt",
    draw_hash: "Draw hash",
    draw_place: "Place in the draw",
    visitor_id: "Your visitor id (check with anteroom verify-draw)",
    closed_title: "The line is closed",
    closed_detail: "This line isn't taking anyone new right now. Thank you for your patience.",
    stalled_detail: "We're having trouble reaching the line. If you were waiting, you keep your place; this page will try again by itself.",
    banned_title: "Access paused",
    banned_detail: "Too many suspicious requests came from your network, so it is blocked for now. Please try again later.",
};

static DE: Catalog = Catalog {
    code: "de",
    dir: "ltr",
    title_default: "Sie sind in der Warteschlange",
    your_place: "Ihr Platz in der Warteschlange",
    announce: "Sie sind Nummer {n} in der Warteschlange.",
    in_line_now: "Jetzt wartend",
    estimated_wait: "Geschätzte Wartezeit",
    eta_under_minute: "unter einer Minute",
    eta_estimating: "wird berechnet…",
    eta_secs: "{n} s",
    eta_mins: "{n} Min.",
    eta_range: "{min} – {max}",
    paused: "Die Warteschlange ist kurz angehalten. Ihr Platz bleibt erhalten.",
    stalled: "Wir erreichen die Warteschlange gerade nicht. Ihr Platz bleibt erhalten, und diese Seite macht von selbst weiter.",
    admitted: "Sie sind an der Reihe. Sie werden weitergeleitet …",
    reconnecting: "Verbindung wird wiederhergestellt …",
    note: "Lassen Sie diese Seite geöffnet: Sie aktualisiert sich selbst und bringt Sie zur Website, sobald Sie an der Reihe sind. Neu laden bringt Sie nicht nach vorn.",
    opens_in: "Die Warteschlange öffnet in",
    before_open_note: "Bleiben Sie auf dieser Seite: Sie stellen sich automatisch an, sobald sie öffnet.",
    doors_open_in: "Einlass in",
    entered: "Bisher angemeldet",
    draw_note: "Wer vor dem Einlass da ist, bekommt einen zufällig gezogenen Platz – Eile lohnt sich also nicht.",
    days: "{n} T",
    closed: "Diese Warteschlange ist geschlossen.",
    refused_title: "Zu viele Anfragen",
    refused_detail: "Aus Ihrem Netzwerk haben sich in kurzer Zeit zu viele Besucher angestellt. Bitte warten Sie einen Moment; diese Seite versucht es von selbst erneut.",
    full_title: "Die Warteschlange ist voll",
    full_detail: "Es warten gerade so viele Menschen, dass niemand mehr dazukommen kann. Bitte versuchen Sie es in Kürze erneut.",
    sold_out_title: "Ausverkauft",
    sold_out_detail: "Alles ist vergeben: Dieser Verkauf ist ausverkauft. Danke fürs Warten.",
    reference: "Ihre Referenz",
    receipt: "Ihr Losbeleg",
    draw_hash: "Los-Hash",
    draw_place: "Platz in der Verlosung",
    visitor_id: "Ihre Besucher-ID (prüfbar mit anteroom verify-draw)",
    closed_title: "Die Warteschlange ist geschlossen",
    closed_detail: "Diese Warteschlange nimmt gerade niemanden mehr auf. Vielen Dank für Ihre Geduld.",
    stalled_detail: "Wir erreichen die Warteschlange gerade nicht. Falls Sie gewartet haben, bleibt Ihr Platz erhalten; diese Seite versucht es von selbst erneut.",
    banned_title: "Zugriff pausiert",
    banned_detail: "Aus Ihrem Netzwerk kamen zu viele verdächtige Anfragen, daher ist es vorerst gesperrt. Bitte versuchen Sie es später erneut.",
};

static ES: Catalog = Catalog {
    code: "es",
    dir: "ltr",
    title_default: "Estás en la fila",
    your_place: "Tu lugar en la fila",
    announce: "Eres el número {n} en la fila.",
    in_line_now: "En la fila ahora",
    estimated_wait: "Espera estimada",
    eta_under_minute: "menos de un minuto",
    eta_estimating: "calculando…",
    eta_secs: "{n} s",
    eta_mins: "{n} min",
    eta_range: "{min} – {max}",
    paused: "La fila está en pausa un momento. Conservas tu lugar.",
    stalled: "Tenemos problemas para conectar con la fila. Conservas tu lugar y esta página seguirá sola.",
    admitted: "Es tu turno. Te llevamos al sitio…",
    reconnecting: "Reconectando…",
    note: "Mantén esta página abierta: se actualiza sola y te lleva al sitio cuando sea tu turno. Recargar no te hace avanzar.",
    opens_in: "La fila abre en",
    before_open_note: "Quédate en esta página: entrarás en la fila en cuanto abra.",
    doors_open_in: "Las puertas abren en",
    entered: "Inscritos hasta ahora",
    draw_note: "Quien llegue antes de que abran las puertas recibe un lugar por sorteo, así que no hace falta apresurarse.",
    days: "{n} d",
    closed: "Esta fila está cerrada.",
    refused_title: "Demasiadas solicitudes",
    refused_detail: "Se unieron demasiados visitantes desde tu red en poco tiempo. Espera un momento; esta página lo volverá a intentar sola.",
    full_title: "La fila está llena",
    full_detail: "Ya hay tantas personas esperando que la fila no admite más por ahora. Vuelve a intentarlo en un rato.",
    sold_out_title: "Agotado",
    sold_out_detail: "Ya no queda nada: esta venta está agotada. Gracias por esperar con nosotros.",
    reference: "Tu referencia",
    receipt: "Tu comprobante del sorteo",
    draw_hash: "Hash del sorteo",
    draw_place: "Puesto en el sorteo",
    visitor_id: "Tu id de visitante (compruébalo con anteroom verify-draw)",
    closed_title: "La fila está cerrada",
    closed_detail: "Esta fila no admite a nadie más por ahora. Gracias por tu paciencia.",
    stalled_detail: "Tenemos problemas para conectar con la fila. Si estabas esperando, conservas tu lugar; esta página lo volverá a intentar sola.",
    banned_title: "Acceso en pausa",
    banned_detail: "Llegaron demasiadas solicitudes sospechosas desde tu red, así que está bloqueada por ahora. Vuelve a intentarlo más tarde.",
};

static FR: Catalog = Catalog {
    code: "fr",
    dir: "ltr",
    title_default: "Vous êtes dans la file",
    your_place: "Votre place dans la file",
    announce: "Vous êtes numéro {n} dans la file.",
    in_line_now: "Dans la file",
    estimated_wait: "Attente estimée",
    eta_under_minute: "moins d'une minute",
    eta_estimating: "en cours d'estimation…",
    eta_secs: "{n} s",
    eta_mins: "{n} min",
    eta_range: "{min} – {max}",
    paused: "La file est en pause un instant. Vous gardez votre place.",
    stalled: "Nous avons du mal à joindre la file. Vous gardez votre place et cette page continue toute seule.",
    admitted: "C'est votre tour. Redirection vers le site…",
    reconnecting: "Reconnexion…",
    note: "Gardez cette page ouverte : elle se met à jour toute seule et vous mène au site quand c'est votre tour. Recharger ne vous fait pas avancer.",
    opens_in: "La file ouvre dans",
    before_open_note: "Restez sur cette page : vous rejoindrez la file dès son ouverture.",
    doors_open_in: "Ouverture des portes dans",
    entered: "Inscrits jusqu'ici",
    draw_note: "Chaque personne arrivée avant l'ouverture reçoit une place tirée au sort : inutile de se presser.",
    days: "{n} j",
    closed: "Cette file est fermée.",
    refused_title: "Trop de requêtes",
    refused_detail: "Trop de visiteurs ont rejoint la file depuis votre réseau en peu de temps. Patientez un instant ; cette page réessaiera toute seule.",
    full_title: "La file est pleine",
    full_detail: "Tant de personnes attendent déjà que la file ne peut plus en accueillir pour le moment. Réessayez dans un petit moment.",
    sold_out_title: "Épuisé",
    sold_out_detail: "Tout est parti : cette vente est épuisée. Merci de votre patience.",
    reference: "Votre référence",
    receipt: "Votre reçu du tirage",
    draw_hash: "Empreinte du tirage",
    draw_place: "Place dans le tirage",
    visitor_id: "Votre identifiant de visiteur (à vérifier avec anteroom verify-draw)",
    closed_title: "La file est fermée",
    closed_detail: "Cette file n'accepte plus personne pour le moment. Merci de votre patience.",
    stalled_detail: "Nous avons du mal à joindre la file. Si vous attendiez, vous gardez votre place ; cette page réessaiera toute seule.",
    banned_title: "Accès suspendu",
    banned_detail: "Trop de requêtes suspectes sont venues de votre réseau ; il est bloqué pour le moment. Veuillez réessayer plus tard.",
};

static AR: Catalog = Catalog {
    code: "ar",
    dir: "rtl",
    title_default: "أنت في قائمة الانتظار",
    your_place: "مكانك في قائمة الانتظار",
    announce: "ترتيبك {n} في قائمة الانتظار.",
    in_line_now: "في الانتظار الآن",
    estimated_wait: "مدة الانتظار المتوقعة",
    eta_under_minute: "أقل من دقيقة",
    eta_estimating: "جارٍ التقدير…",
    eta_secs: "{n} ث",
    eta_mins: "{n} د",
    eta_range: "{min} – {max}",
    paused: "تم إيقاف قائمة الانتظار مؤقتًا. ستحتفظ بمكانك.",
    stalled: "نواجه صعوبة في الوصول إلى قائمة الانتظار. ستحتفظ بمكانك، وستتابع هذه الصفحة تلقائيًا.",
    admitted: "حان دورك. جارٍ نقلك إلى الموقع…",
    reconnecting: "جارٍ إعادة الاتصال…",
    note: "أبقِ هذه الصفحة مفتوحة: فهي تتحدث تلقائيًا وتنقلك إلى الموقع عندما يحين دورك. إعادة تحميل الصفحة لن تقدّمك في الترتيب.",
    opens_in: "تُفتح قائمة الانتظار خلال",
    before_open_note: "ابقَ في هذه الصفحة: ستنضم إلى قائمة الانتظار فور فتحها.",
    doors_open_in: "تُفتح الأبواب خلال",
    entered: "عدد المسجلين حتى الآن",
    draw_note: "كل من يصل قبل فتح الأبواب يحصل على مكان بالقرعة، فلا داعي للاستعجال.",
    days: "{n} يوم",
    closed: "قائمة الانتظار هذه مغلقة.",
    refused_title: "طلبات كثيرة جدًا",
    refused_detail: "انضم عدد كبير جدًا من الزوار من شبكتك في وقت قصير. يُرجى الانتظار قليلًا؛ ستعيد هذه الصفحة المحاولة تلقائيًا.",
    full_title: "الطابور ممتلئ",
    full_detail: "ينتظر الآن عدد كبير جدًا من الأشخاص ولا يتسع الطابور لمزيد. يُرجى المحاولة مرة أخرى بعد قليل.",
    sold_out_title: "نفدت الكمية",
    sold_out_detail: "نفد كل شيء: انتهى هذا البيع. شكرًا لانتظارك معنا.",
    reference: "رقمك المرجعي",
    receipt: "إيصال القرعة الخاص بك",
    draw_hash: "بصمة القرعة",
    draw_place: "مكانك في القرعة",
    visitor_id: "معرّف الزائر الخاص بك (تحقق منه باستخدام anteroom verify-draw)",
    closed_title: "قائمة الانتظار مغلقة",
    closed_detail: "لا تستقبل قائمة الانتظار هذه أحدًا جديدًا حاليًا. شكرًا لصبرك.",
    stalled_detail: "نواجه صعوبة في الوصول إلى قائمة الانتظار. إذا كنت تنتظر فستحتفظ بمكانك؛ ستعيد هذه الصفحة المحاولة تلقائيًا.",
    banned_title: "تم إيقاف الوصول مؤقتًا",
    banned_detail: "وصلت طلبات مريبة كثيرة من شبكتك، لذا تم حظرها حاليًا. يُرجى المحاولة لاحقًا.",
};

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(s: &str) -> Lang {
        negotiate(Some(&HeaderValue::from_str(s).unwrap()))
    }

    #[test]
    fn negotiates_by_q_value_with_english_fallback() {
        assert_eq!(negotiate(None), Lang::En);
        assert_eq!(pick("de"), Lang::De);
        assert_eq!(pick("de-AT,de;q=0.9,en;q=0.8"), Lang::De);
        assert_eq!(pick("en;q=0.5, es"), Lang::Es);
        assert_eq!(pick("ja, ko;q=0.9"), Lang::En);
        assert_eq!(pick("ja, fr;q=0.3"), Lang::Fr);
        assert_eq!(pick("AR-eg"), Lang::Ar);
        assert_eq!(pick("de;q=0, es;q=0.1"), Lang::Es);
        assert_eq!(pick("es, de"), Lang::Es, "the first of equals wins");
        assert_eq!(pick("*;q=0.9, de;q=0.5"), Lang::En);
        assert_eq!(pick(";;;q=x,,"), Lang::En);
        assert_eq!(pick("de;q=2"), Lang::En, "an out-of-range q is ignored");
    }

    #[test]
    fn every_language_is_complete_and_keeps_its_placeholders() {
        for lang in Lang::ALL {
            let c = lang.catalog();
            let json = serde_json::to_value(c).unwrap();
            for (key, value) in json.as_object().unwrap() {
                assert!(!value.as_str().unwrap().is_empty(), "{}: {key}", c.code);
            }
            assert!(c.announce.contains("{n}"), "{}", c.code);
            assert!(c.eta_secs.contains("{n}") && c.eta_mins.contains("{n}"));
            assert!(c.eta_range.contains("{min}") && c.eta_range.contains("{max}"));
            assert!(c.days.contains("{n}"));
            assert_eq!(c.dir == "rtl", lang == Lang::Ar);
            if lang != Lang::En {
                assert_ne!(c.your_place, EN.your_place, "{} is translated", c.code);
                assert_ne!(c.note, EN.note, "{} is translated", c.code);
            }
        }
    }

    /// Every string of every page, by key (`errors.bad_grant.title`, …), in `lang`.
    fn strings(lang: Lang) -> Vec<(String, String)> {
        fn walk(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
            match value {
                serde_json::Value::Object(map) => {
                    for (key, value) in map {
                        let key = if prefix.is_empty() {
                            key.clone()
                        } else {
                            format!("{prefix}.{key}")
                        };
                        walk(&key, value, out);
                    }
                }
                serde_json::Value::String(s) => out.push((prefix.to_owned(), s.clone())),
                other => panic!("{prefix}: not a string: {other}"),
            }
        }
        let mut out = Vec::new();
        walk("", &serde_json::to_value(lang.catalog()).unwrap(), &mut out);
        walk(
            "errors",
            &serde_json::to_value(lang.errors()).unwrap(),
            &mut out,
        );
        walk(
            "challenge",
            &serde_json::to_value(lang.challenge()).unwrap(),
            &mut out,
        );
        assert!(lang.challenge().no_js.contains("{n}"), "{lang:?}");
        out
    }

    /// Strings that are the same in some language as in English by design: formats made
    /// only of placeholders and units, and names that are not translated.
    const SAME_AS_ENGLISH: &[&str] = &["eta_secs", "eta_mins", "eta_range", "days"];

    #[test]
    fn every_string_of_every_page_is_translated_in_every_language() {
        let english = strings(Lang::En);
        assert!(english.len() > 60, "the walk found the strings");
        for lang in Lang::ALL.into_iter().filter(|l| *l != Lang::En) {
            let theirs: std::collections::BTreeMap<_, _> = strings(lang).into_iter().collect();
            assert_eq!(theirs.len(), english.len(), "{lang:?} has every key");
            for (key, en) in &english {
                let text = &theirs[key];
                assert!(!text.trim().is_empty(), "{lang:?}: {key} is empty");
                if !SAME_AS_ENGLISH.contains(&key.as_str()) && key != "code" && key != "dir" {
                    assert_ne!(text, en, "{lang:?}: {key} is not translated");
                }
            }
        }
    }

    #[test]
    fn every_string_a_built_in_template_uses_is_in_the_catalog() {
        let keys: std::collections::BTreeSet<_> =
            strings(Lang::En).into_iter().map(|(k, _)| k).collect();
        for (name, template) in [
            ("waiting.html", include_str!("templates/waiting.html")),
            ("board.html", include_str!("templates/board.html")),
            ("message.html", include_str!("templates/message.html")),
            ("challenge.html", include_str!("templates/challenge.html")),
        ] {
            let mut rest = template;
            let mut used = 0;
            while let Some(i) = rest.find("t.") {
                let before = rest[..i].chars().next_back();
                rest = &rest[i + 2..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
                    continue;
                }
                let key: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if key.is_empty() {
                    continue;
                }
                used += 1;
                assert!(
                    keys.contains(&key),
                    "{name} uses t.{key}, not in the catalog"
                );
            }
            assert!(
                used > 0 || name == "message.html",
                "{name} uses the catalog"
            );
        }
    }

    #[test]
    fn eta_is_a_range_never_zero_seconds() {
        assert_eq!(EN.eta(0, 0), "under a minute");
        assert_eq!(EN.eta(0, 20), "1 s – 20 s");
        assert_eq!(EN.eta(120, 300), "2 min – 5 min");
        assert_eq!(EN.eta(300, 300), "5 min");
        assert_eq!(DE.eta(120, 300), "2 Min. – 5 Min.");
    }

    #[test]
    fn only_the_default_title_is_translated() {
        assert_eq!(title("You're in line", &DE), DE.title_default);
        assert_eq!(title("", &ES), ES.title_default);
        assert_eq!(title("Sneaker drop", &DE), "Sneaker drop");
    }
}
