// Unit tests for the redaction of the data directory from client-facing messages.
#include "common/redact.h"

#include <gtest/gtest.h>

namespace tinkerd {
namespace {

TEST(Redact, HidesTheDataDirInGivenAndAbsoluteForms) {
    set_redacted_data_dir("/srv/tinkerd/data/");
    EXPECT_EQ(redact_paths("cannot write /srv/tinkerd/data/runs/x/weights/a.tmp-1: No space left"),
              "cannot write DATA_DIR/runs/x/weights/a.tmp-1: No space left");
    EXPECT_EQ(redact_paths("a /srv/tinkerd/data and /srv/tinkerd/data/b"), "a DATA_DIR and DATA_DIR/b");
    EXPECT_EQ(redact_paths("no paths here"), "no paths here");
    set_redacted_data_dir("/");  // never "/" itself: every message would be mangled
    EXPECT_EQ(redact_paths("/etc/x"), "/etc/x");
    set_redacted_data_dir("");
}

}  // namespace
}  // namespace tinkerd
