// The capture contract: every forbidden action inside a captured region fails at once with an
// error naming the op and the buffer.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace tracelm {
namespace {

class CaptureContract : public ::testing::Test {
   protected:
    cpu::CpuBackend be{2};
    Buffer* logits = be.alloc(64 * sizeof(float), "logits");
    Tensor t = whole(logits, DType::F32, 4, 16);

    // Runs f inside a capture and returns the CaptureViolation message it raised.
    template <typename F>
    std::string violation(F f) {
        be.begin_capture();
        std::string msg = "<no error>";
        try {
            f();
        } catch (const CaptureViolation& e) {
            msg = e.what();
        }
        EXPECT_TRUE(be.capturing()) << "a violation must not silently end the capture";
        be.end_capture();
        return msg;
    }
};

TEST_F(CaptureContract, DownloadIsRefused) {
    std::vector<float> host(64);
    EXPECT_EQ(violation([&] { be.download(t, host.data()); }),
              "capture violation: download of 'logits' inside captured region");
}

TEST_F(CaptureContract, UploadIsRefused) {
    std::vector<float> host(64);
    EXPECT_EQ(violation([&] { be.upload(t, host.data()); }), "capture violation: upload of 'logits' inside captured region");
}

TEST_F(CaptureContract, AllocIsRefused) {
    EXPECT_EQ(violation([&] { be.alloc(128, "scratch"); }), "capture violation: alloc of 'scratch' inside captured region");
}

TEST_F(CaptureContract, FreeIsRefused) {
    EXPECT_EQ(violation([&] { be.free(logits); }), "capture violation: free of 'logits' inside captured region");
    // The refused free really did nothing: the buffer is still usable.
    std::vector<float> host(64, 3.0f), back(64);
    be.upload(t, host.data());
    be.download(t, back.data());
    EXPECT_EQ(back, host);
}

TEST_F(CaptureContract, SynchronizeIsRefused) {
    EXPECT_EQ(violation([&] { be.synchronize(); }), "capture violation: synchronize inside captured region");
}

TEST_F(CaptureContract, ReplayAndNestedCaptureAreRefused) {
    be.begin_capture();
    const GraphId g = be.end_capture();
    EXPECT_EQ(violation([&] { be.replay(g); }), "capture violation: replay inside captured region");
    EXPECT_EQ(violation([&] { be.begin_capture(); }), "capture violation: begin_capture inside captured region");
}

TEST_F(CaptureContract, DeviceOpsAreRecordedNotRun) {
    // Capture records; nothing executes until replay, and each replay runs the recorded op again.
    Buffer* ob = be.alloc(64 * sizeof(float), "out");
    const Tensor out = whole(ob, DType::F32, 4, 16);
    std::vector<float> ones(64, 1.0f), zeros(64, 0.0f), back(64);
    be.upload(t, ones.data());
    be.upload(out, zeros.data());
    be.begin_capture();
    be.add(t, out, out);
    const GraphId g = be.end_capture();
    be.download(out, back.data());
    EXPECT_EQ(back, zeros);
    be.replay(g);
    be.replay(g);
    be.download(out, back.data());
    EXPECT_EQ(back, std::vector<float>(64, 2.0f));
    EXPECT_EQ(be.graph_nodes(g), 1u);
}

}  // namespace
}  // namespace tracelm
