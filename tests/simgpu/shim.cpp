// Part of the simulated GPU used by the course's tests (tests/simgpu). Not a GPU driver.
//
// A CPU-only build of torch has no CUDA device guard and no CUDA hooks, and its autograd engine
// aborts the process as soon as a tensor whose device is `cuda` takes part in backward. This
// library registers both, for exactly one device whose events complete at once; the Python side
// of the simulation (tensors.py, runtime.py) models everything else. It must be loaded before
// torch looks its hooks up, so the plugin preloads it (LD_PRELOAD) and re-executes pytest.
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace at {
struct SimulatedCUDAHooks : CUDAHooksInterface {
  SimulatedCUDAHooks(CUDAHooksArgs) {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  void init() const override {}
  DeviceIndex deviceCount() const override { return 1; }
  int getNumGPUs() const override { return 1; }
  DeviceIndex current_device() const override { return 0; }
  DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(DeviceIndex) const override {}
  DeviceIndex exchangeDevice(DeviceIndex) const override { return 0; }
  DeviceIndex maybeExchangeDevice(DeviceIndex) const override { return 0; }
  void deviceSynchronize(DeviceIndex) const override {}
};
// getCUDAHooks() asks the registry for the name "CUDAHooks".
C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", SimulatedCUDAHooks)
}  // namespace at

namespace {
struct OneSimulatedDevice final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }
  c10::Device exchangeDevice(c10::Device) const override { return {c10::DeviceType::CUDA, 0}; }
  c10::Device getDevice() const override { return {c10::DeviceType::CUDA, 0}; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override { return c10::Stream(c10::Stream::UNSAFE, d, 0); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::UNSAFE, d, 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return c10::Stream(c10::Stream::UNSAFE, d, 0); }
  c10::Stream getNewStream(c10::Device d, int) const override { return c10::Stream(c10::Stream::UNSAFE, d, 0); }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};
c10::impl::DeviceGuardImplRegistrar registrar(c10::DeviceType::CUDA, new OneSimulatedDevice());
}  // namespace
