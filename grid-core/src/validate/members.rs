//! Member names unique in every object of a request body (RFC 7493,
//! I-JSON: "objects MUST NOT have members with duplicate names"). A body
//! that says `{"ttlMinutes": 1, "ttlMinutes": 240}` means whichever the
//! reader keeps (serde_json: the last); the grid refuses it instead of
//! guessing, naming where the second name is.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The JSON pointer (RFC 6901) of the first member whose name its object
/// already had, when there is one; `None` for a body whose objects all have
/// unique names, or that is not JSON (its parse error is reported by the
/// reader that parses it). One pass, holding one object's names per level.
pub fn duplicate_member(body: &[u8]) -> Option<String> {
    let found = RefCell::new(None);
    let mut path = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = Walk { path: &mut path, found: &found }.deserialize(&mut de);
    found.into_inner()
}

/// Walks one value at `path`, stopping at the first repeated name.
struct Walk<'a> {
    path: &'a mut Vec<String>,
    found: &'a RefCell<Option<String>>,
}

/// RFC 6901: `~` as `~0`, `/` as `~1`.
fn pointer(path: &[String]) -> String {
    path.iter().map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1"))).collect()
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            self.path.push(i.to_string());
            let more = seq.next_element_seed(Walk { path: self.path, found: self.found })?;
            self.path.pop();
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut names = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            self.path.push(name.clone());
            if !names.insert(name) {
                *self.found.borrow_mut() = Some(pointer(self.path));
                return Err(de::Error::custom("duplicate member"));
            }
            map.next_value_seed(Walk { path: self.path, found: self.found })?;
            self.path.pop();
        }
        Ok(())
    }
}

/// The refusal's line for a body whose member at `pointer` repeats a name.
pub fn problem(pointer: &str) -> String {
    format!("{pointer}: this member's name appears twice in its object; send each name once (RFC 7493)")
}

#[cfg(test)]
mod tests {
    use super::duplicate_member;

    #[test]
    fn the_first_repeated_name_is_named_by_its_pointer_at_any_depth() {
        assert_eq!(duplicate_member(br#"{"ttlMinutes":1,"ttlMinutes":240}"#).as_deref(), Some("/ttlMinutes"));
        assert_eq!(
            duplicate_member(br#"{"urls":["a"],"params":{"fullPage":true,"x":{"a/b":1,"a/b":2}}}"#).as_deref(),
            Some("/params/x/a~1b")
        );
        assert_eq!(duplicate_member(br#"[{"a":1},{"b":1,"b":2}]"#).as_deref(), Some("/1/b"));
        // The same name in sibling objects, or at two levels, is no repeat.
        assert_eq!(duplicate_member(br#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#), None);
        // Escapes read as their characters: "\u0061" is "a".
        assert_eq!(duplicate_member(br#"{"a":1,"\u0061":2}"#).as_deref(), Some("/a"));
        // Not JSON: left to the body's own parse.
        assert_eq!(duplicate_member(b"{\"a\":"), None);
    }
}
