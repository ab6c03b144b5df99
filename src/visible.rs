//! Text shown to a person (the approval page, `portcullis tools diff`), with every character
//! that does not show as itself written as a visible escape: a backend or an agent chooses
//! that text, and an invisible or reordering character would let it show the person one thing
//! while another is approved or pinned.

use icu_properties::props::{DefaultIgnorableCodePoint, GeneralCategory, GeneralCategoryGroup};
use icu_properties::{CodePointMapData, CodePointSetData};

/// `text` with each character [`is_invisible`] says a person would not see as itself written
/// as `\u{HEX}`; everything else unchanged.
pub(crate) fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `c` does not show as a glyph of its own, or changes how the text around it is
/// ordered or joined: every control but tab and line feed (C0, DEL, C1), every format
/// character (general category Cf: soft hyphen, zero-width spaces and joiners, the
/// bidirectional embeddings, overrides, isolates and marks, word joiners, the byte-order mark,
/// interlinear annotation marks, tag characters), private-use and unassigned code points, the
/// line and paragraph separators, every space but U+0020 (a no-break or ideographic space
/// looks like a space and is not one), and the default-ignorable code points (variation
/// selectors, Hangul fillers, the Mongolian vowel separator). The properties are Unicode's,
/// from ICU4X's compiled data, not a list kept by hand.
pub fn is_invisible(c: char) -> bool {
    if c.is_ascii_graphic() || matches!(c, ' ' | '\t' | '\n') {
        return false;
    }
    let hidden = GeneralCategoryGroup::Other.union(GeneralCategoryGroup::Separator);
    hidden.contains(CodePointMapData::<GeneralCategory>::new().get(c)) || CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_reordering_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(escaped("pay\u{202e}NABI\u{202c} to\u{200b} Bob\u{1b}[2J"), "pay\\u{202e}NABI\\u{202c} to\\u{200b} Bob\\u{1b}[2J");
        assert_eq!(escaped("tag\u{e0041}\u{e007f}"), "tag\\u{e0041}\\u{e007f}");
        assert_eq!(escaped("\u{feff}x\u{2066}y\u{2069}\u{ad}\u{85}"), "\\u{feff}x\\u{2066}y\\u{2069}\\u{ad}\\u{85}");
        let plain = "Zürich 東京 👍🏽 «ok» — \"quoted\"\tand\nlines";
        assert_eq!(escaped(plain), plain, "letters, emoji with their modifiers, tabs and line feeds show as themselves");
    }

    #[test]
    fn every_format_character_of_the_basic_plane_is_invisible() {
        // The general category Cf of the BMP (Unicode 15), which a terminal or a browser
        // renders as nothing or as a change of direction.
        let cf = [
            0xad, 0x600, 0x601, 0x602, 0x603, 0x604, 0x605, 0x61c, 0x6dd, 0x70f, 0x890, 0x891, 0x8e2, 0x180e, 0x200b, 0x200c, 0x200d, 0x200e, 0x200f, 0x202a,
            0x202e, 0x2060, 0x2064, 0x2066, 0x2069, 0x206a, 0x206f, 0xfeff, 0xfff9, 0xfffb,
        ];
        let missed: Vec<String> =
            cf.iter().filter_map(|&u| char::from_u32(u)).filter(|&c| !is_invisible(c)).map(|c| format!("U+{:04X}", u32::from(c))).collect();
        assert!(missed.is_empty(), "format characters shown as themselves: {missed:?}");
    }

    #[test]
    fn look_alike_spaces_private_use_and_unassigned_code_points_are_invisible_too() {
        for c in ['\u{a0}', '\u{2000}', '\u{202f}', '\u{3000}', '\u{e000}', '\u{f8ff}', '\u{10ffff}', '\u{e0100}', '\u{3164}', '\u{180e}'] {
            assert!(is_invisible(c), "U+{:04X}", u32::from(c));
        }
        for c in ['a', '~', ' ', '\t', '\n', 'é', 'ж', '中', '€', '😀', '\u{301}', '\u{1f3fd}'] {
            assert!(!is_invisible(c), "U+{:04X}", u32::from(c));
        }
    }
}
